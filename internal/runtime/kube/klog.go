package kube

import (
	"sync"

	"github.com/go-logr/logr/funcr"
	"github.com/hashicorp/go-hclog"
	"k8s.io/klog/v2"
)

var klogOnce sync.Once

// RouteClientLogs sends client-go's own log lines (klog) to log at debug
// level; the first call in a process wins. Left alone, klog writes
// unstructured "E…" lines to stderr whenever an attach stream is torn down
// at the end of a message, which an operator would read as errors in the
// runner's log. log must live as long as the process (the runner's own).
func RouteClientLogs(log hclog.Logger) {
	klogOnce.Do(func() {
		klog.SetLogger(funcr.New(func(prefix, args string) {
			log.Debug("client-go", "logger", prefix, "detail", args)
		}, funcr.Options{}))
	})
}
