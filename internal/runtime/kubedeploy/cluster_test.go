package kubedeploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The acceptance tests run against the project's own cluster:
//
//	export MEEPA_KUBECONFIG=$(flock -o /tmp/meepa-acc.lock scripts/k8s-up.sh)
//	TF_ACC=1 flock -o /tmp/meepa-acc.lock go test ./internal/runtime/kubedeploy/

// apiServer is the API server's address as pods reach it: the endpoint
// of the kubernetes Service (the test cluster runs no kube-proxy).
func apiServer(t *testing.T, c *kube.Client) string {
	t.Helper()
	list, err := c.Clientset.DiscoveryV1().EndpointSlices("default").List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	testutil.Must(t, err)
	for _, es := range list.Items {
		if len(es.Endpoints) > 0 && len(es.Endpoints[0].Addresses) > 0 && len(es.Ports) > 0 && es.Ports[0].Port != nil {
			return net.JoinHostPort(es.Endpoints[0].Addresses[0], strconv.Itoa(int(*es.Ports[0].Port)))
		}
	}
	t.Fatalf("no endpoint of the kubernetes Service: %+v", list.Items)
	return ""
}

// workspaceVolume is a hostPath PersistentVolume reserved for the agent's
// claim (the test cluster has no provisioner); the directory belongs to
// the sandbox user, since no fsGroup change reaches a hostPath.
func workspaceVolume(t *testing.T, c *kube.Client, agentID string) (string, string) {
	t.Helper()
	dir := testutil.SharedTempDir(t)
	testutil.Must(t, os.Chown(dir, sandbox.DefaultUID, sandbox.DefaultGID))
	name := c.Namespace + "-ws"
	hostDir := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(DefaultWorkspaceSize)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: NamesFor(agentID).Claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}},
		},
	}
	_, err := c.Clientset.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete volume "+name, func() error {
		return ignoreNotFound(c.Clientset.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	return name, dir
}

// forward opens a port-forward to a pod's port through the API server and
// returns the local address.
func forward(t *testing.T, c *kube.Client, pod string, port int32) string {
	t.Helper()
	tr, up, err := spdy.RoundTripperFor(c.REST)
	testutil.Must(t, err)
	u := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.Namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(up, &http.Client{Transport: tr}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	testutil.Must(t, err)
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready after 30 s")
	}
	t.Cleanup(func() { close(stop) })
	ports, err := fw.GetPorts()
	testutil.Must(t, err)
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
}

// send posts a message and returns the HTTP status and the decoded body.
func send(t *testing.T, addr, token, text string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", bytes.NewReader(body))
	testutil.Must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	testutil.Must(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("reply %d %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}
