package kube

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// serviceAccountNamespace is where a pod's service-account volume names
// the pod's own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// InCluster connects from inside a pod with its service account: the API
// server from KUBERNETES_SERVICE_HOST/PORT, the token and CA from the
// mounted service-account volume. namespace "" is the pod's own.
func InCluster(namespace string) (*Client, error) {
	restCfg, err := rest.InClusterConfig()
	if err != nil {
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("kubernetes: not running in a pod (no KUBERNETES_SERVICE_HOST), or its service-account token is not mounted")
		}
		return nil, fmt.Errorf("kubernetes: in-cluster config: %w", err)
	}
	if namespace == "" {
		raw, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: the pod's namespace: %w", err)
		}
		namespace = strings.TrimSpace(string(raw))
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("kubernetes: namespace %q: %s", namespace, errs[0])
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client: %w", err)
	}
	return &Client{Clientset: cs, REST: restCfg, Namespace: namespace}, nil
}
