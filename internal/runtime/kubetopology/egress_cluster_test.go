package kubetopology

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestFetchEgressOnCluster: two FETCH agents of one topology on the
// cluster, one narrowed to one of the topology's two entries. Each
// message's fetch reaches the proxy with its own credential (the proxy's
// audit names agent and message); the narrowed agent's fetch of the other
// entry is refused by its own list, the sibling's passes the list. From a
// FETCH execution pod, no, a forged and the ended (revoked) message's
// credential get 407, a live one is past the credential check and held
// to the agent's list.
func TestFetchEgressOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kegress")
	image := testkube.RunnerImage(t)
	ctx := context.Background()
	svc := NewService(c, Options{Logger: testLogger{t}, PullPolicy: corev1.PullNever, ReadyTimeout: 90 * time.Second})
	s, ps := Build(topospec.Input{Name: "tge", Proxy: topospec.ProxyInput{Image: image, Allow: []string{"192.0.2.10:443", "192.0.2.11:443"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	testutil.Cleanup(t, "teardown topology", func() error { return svc.Teardown(context.Background(), s.Name) })
	st, err := svc.Apply(ctx, s)
	testutil.Must(t, err)

	kd := kubedeploy.NewService(kubedeploy.Options{Client: c, Version: "test", APIServer: testkube.APIServer(t, c), Logger: testLogger{t}})
	narrow, sibling := "tf-acc-eg-narrow", "tf-acc-eg-sibling"
	apply := func(id string, eg *agentspec.Egress) kubedeploy.Applied {
		empty := ""
		testkube.ReservedVolume(t, c, kubedeploy.NamesFor(id).Claim, kubedeploy.DefaultWorkspaceSize)
		vol := c.Namespace + "-" + kubedeploy.NamesFor(id).Claim // the volume ReservedVolume made
		a := kubedeploy.Agent{
			Config: agentspec.Config{AgentID: id, Role: agentspec.RoleFetch, Egress: eg,
				Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(128 << 20), TimeoutSeconds: 60},
				LLM:       agentspec.LLMConfig{Provider: "offline"}},
			PullPolicy: corev1.PullNever, ThreegateNetwork: s.Name,
			Workspace: kubedeploy.Workspace{StorageClass: &empty, Volume: vol},
		}
		testutil.Cleanup(t, "remove "+id, func() error { return kd.Remove(context.Background(), id, true) })
		out, err := kd.Apply(ctx, a)
		if err != nil {
			t.Fatalf("apply %s: %v", id, err)
		}
		return out
	}
	only, err := proxy.ParsePattern("192.0.2.10:443")
	testutil.Must(t, err)
	nOut := apply(narrow, &agentspec.Egress{Policy: proxy.Policy{Allow: proxy.Allowlist{only}}})
	sOut := apply(sibling, nil)

	// The narrowed agent's key and the proxy URL are in its config Secret.
	sec, err := c.Clientset.CoreV1().Secrets(c.Namespace).Get(ctx, kubedeploy.NamesFor(narrow).Base, metav1.GetOptions{})
	testutil.Must(t, err)
	var cfg agentspec.Config
	testutil.Must(t, json.Unmarshal(sec.Data[kubedeploy.SecretConfigKey], &cfg))
	if cfg.Egress == nil || cfg.Egress.Proxy != st.ProxyURL || len(cfg.Egress.Policy.Allow) != 1 {
		t.Fatalf("egress block in the config Secret: %+v; want the key, %s and the policy", cfg.Egress, st.ProxyURL)
	}
	key, err := hex.DecodeString(cfg.Egress.Key)
	testutil.Must(t, err)

	fetch := func(id string, out kubedeploy.Applied) string {
		addr := testkube.Forward(t, c, out.RunnerPod, kubedeploy.DefaultPort)
		body, _ := json.Marshal(map[string]string{"text": agent.OfflineFetchPrefix + "https://192.0.2.11/"})
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", bytes.NewReader(body))
		testutil.Must(t, err)
		req.Header.Set("Authorization", "Bearer "+out.Token)
		resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
		testutil.Must(t, err)
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var r map[string]any
		if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != http.StatusOK {
			rl, _ := c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(out.RunnerPod, &corev1.PodLogOptions{}).DoRaw(ctx)
			pp, _ := svc.proxyPods(ctx, s.Name)
			var pl []byte
			if len(pp) > 0 {
				pl, _ = c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(pp[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			}
			ev, _ := c.Clientset.CoreV1().Events(c.Namespace).List(ctx, metav1.ListOptions{})
			var evs []string
			for _, e := range ev.Items {
				evs = append(evs, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
			}
			t.Fatalf("%s: reply %d %s\nrunner:\n%s\nproxy:\n%s\nevents:\n%s", id, resp.StatusCode, raw, rl, pl, strings.Join(evs, "\n"))
		}
		t.Logf("%s: %v", id, r["reply"])
		mid, _ := r["message_id"].(string)
		return mid
	}
	nMsg, sMsg := fetch(narrow, nOut), fetch(sibling, sOut)

	// The proxy's audit: each message's request under its agent and
	// message; the narrowed agent's refused by its own list.
	pods, err := svc.proxyPods(ctx, s.Name)
	testutil.Must(t, err)
	logs, err := c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(pods[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	testutil.Must(t, err)
	reasons := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(logs))
	for sc.Scan() {
		var rec proxy.AuditRecord
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Host == "192.0.2.11" && rec.Message != "" {
			reasons[rec.Agent+"/"+rec.Message] = rec.Reason
		}
	}
	t.Logf("proxy audit reasons for 192.0.2.11:443: %v", reasons)
	if r, ok := reasons[narrow+"/"+nMsg]; !ok || r != "not in the agent's allow list" {
		t.Errorf("narrowed agent's request: audit reason %q (present %v), want not in the agent's allow list", r, ok)
	}
	// Past both lists: the proxy dialled (the test network has no route).
	if r, ok := reasons[sibling+"/"+sMsg]; !ok || !strings.HasPrefix(r, "upstream unreachable") {
		t.Errorf("sibling's request: audit reason %q (present %v), want past both lists (upstream unreachable)", r, ok)
	}

	// Credentials presented from a FETCH execution pod.
	mint := func(k []byte, msg string) string {
		cred, err := proxy.Mint(k, proxy.Claims{Agent: narrow, Role: agentspec.RoleFetch, Message: msg, Expiry: time.Now().Add(time.Minute).Unix(), Policy: cfg.Egress.Policy})
		testutil.Must(t, err)
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(narrow+":"+cred))
	}
	ap := netip.MustParseAddrPort(strings.TrimPrefix(st.ProxyURL, "http://"))
	live := mint(key, "live-1")
	cases := []struct{ name, auth, target, want string }{
		{"no credential", "", "192.0.2.10:443", "HTTP/1.1 407"},
		{"forged", mint(make([]byte, proxy.KeySize), "forged-1"), "192.0.2.10:443", "HTTP/1.1 407"},
		{"ended message", mint(key, nMsg), "192.0.2.10:443", "HTTP/1.1 407"},
		// Past the credential and both lists: the proxy dials (no route).
		{"live", live, "192.0.2.10:443", "HTTP/1.1 502"},
		{"live, off the agent's list", live, "192.0.2.11:443", "HTTP/1.1 403"},
	}
	script := "sleep 3; "
	for _, cs := range cases {
		h := ""
		if cs.auth != "" {
			h = "Proxy-Authorization: " + cs.auth + "\\r\\n"
		}
		script += fmt.Sprintf("printf 'CONNECT %[1]s HTTP/1.1\\r\\nHost: %[1]s\\r\\n%[2]s\\r\\n' | nc -w 3 %[3]s %[4]d 2>/dev/null | head -1; ",
			cs.target, h, ap.Addr(), ap.Port())
	}
	name := startPod(t, c, "egress-probe", kube.ThreeGateExecutionLabels(s.Name, topospec.RoleFetch), image, script)
	testutil.Cleanup(t, "delete the probe pod", func() error {
		zero := int64(0)
		err := c.Clientset.CoreV1().Pods(c.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			waitGone(t, c, name)
		}
		return err
	})
	got := strings.Split(strings.TrimSpace(podOutput(t, c, name)), "\n")
	for i, cs := range cases {
		line := ""
		if i < len(got) {
			line = strings.TrimSpace(got[i])
		}
		t.Logf("%-28s CONNECT %s → %s", cs.name, cs.target, line)
		if !strings.HasPrefix(line, cs.want) {
			t.Errorf("%s credential: %q, want %s", cs.name, line, cs.want)
		}
	}
}
