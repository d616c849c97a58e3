package provider

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
)

// refuseRemoteFirewall stops a plan whose host firewall would be written
// into this machine's iptables while the daemon, and so the containers,
// run on another: the topology would converge with no enforcement at all.
// (A unix socket that leads elsewhere is caught by the topology service at
// apply.)
func refuseRemoteFirewall(d *providerData, spec topology.Spec, diags *diag.Diagnostics) bool {
	if !spec.Firewall.Enabled || dockerIsLocal(d) {
		return false
	}
	diags.AddAttributeError(path.Root("firewall").AtName("enabled"), "Host Firewall Needs A Local Docker Daemon",
		fmt.Sprintf("docker_host is %s: a daemon reached over TCP may run on another machine (even on a loopback address it "+
			"can be a forwarded port), but the host firewall (iptables chains and the guard that restores them) is written on "+
			"the machine that runs terraform, so the topology's containers could run without it. Run terraform on the Docker host (docker_host unset or its unix:// socket), or set "+
			"firewall = { enabled = false } and enforce the topology on that host yourself (see iptables_restore).",
			engine.HostOf(d.docker.opts)))
	return true
}
