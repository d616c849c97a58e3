// Package kube is the Kubernetes backend of the runtime: a client-go
// connection made from the provider's (config_path, context, namespace) and
// the per-message Pod sandbox. It imports no Terraform types.
package kube

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultNamespace is used when neither the config nor the kubeconfig
// context names a namespace.
const DefaultNamespace = "default"

// Config says how to reach a cluster. The zero value is what kubectl does:
// $KUBECONFIG or ~/.kube/config, its current context and that context's
// namespace (else DefaultNamespace).
type Config struct {
	// ConfigPath is a kubeconfig file; empty follows kubectl's rules.
	ConfigPath string
	// Context is a context of the kubeconfig; empty is its current one.
	Context string
	// Namespace overrides the context's namespace.
	Namespace string
}

// Client is a connection to one namespace of a cluster.
type Client struct {
	Clientset kubernetes.Interface
	// REST is the config that made Clientset; streams (attach) need it.
	REST      *rest.Config
	Namespace string
}

// Connect loads the kubeconfig and makes a client. Nothing is sent to the
// cluster: a cluster that is down is only noticed at the first call.
func Connect(c Config) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.ConfigPath != "" {
		rules.ExplicitPath = c.ConfigPath
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.Context})
	restCfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("kubernetes: no kubeconfig found: set config_path or $KUBECONFIG")
		}
		return nil, fmt.Errorf("kubernetes: load kubeconfig: %w", err)
	}
	ns := c.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = DefaultNamespace
		}
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return nil, fmt.Errorf("kubernetes: namespace %q: %s", ns, errs[0])
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	return &Client{Clientset: cs, REST: restCfg, Namespace: ns}, nil
}
