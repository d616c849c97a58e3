#!/usr/bin/env bash
# testacc-clis.sh: the provider's acceptance tests once more with the
# newest Terraform and OpenTofu (the main `make testacc` run uses the
# terraform on PATH, the pinned minimum 1.11). A named subset, not the whole
# suite: every resource's lifecycle, the functions, the module tests, the
# fleet through the CLI and one cluster agent, plus every plan-only test;
# that is where the CLIs differ (the protocol, plan rendering, modules,
# `terraform test`). What a CLI lacks is skipped by the test itself, naming
# the CLI and the reason.
#
# Each CLI comes from scripts/tools.sh, cached by version; one not built yet
# is built for at most MEEPA_TERRAFORM_BUILD_BUDGET or MEEPA_TOFU_BUILD_BUDGET
# seconds (default: as long as it takes), else its leg is skipped and the
# log says so.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "${TF_CLI_CONFIG_FILE:-}" ] || unset TF_CLI_CONFIG_FILE
SUBSET='^(TestFunction|TestExampleModuleTests|TestAccQuickstartModuleTest|TestAccIsolationImage_lifecycle|TestAccThreegateNetwork_lifecycle|TestAccAgent_lifecycle|TestAccAgent_threegate|TestAccFleetModuleThroughTheCLI|TestAccKube_agent|TestAgent|TestThreegateNetwork_|TestIsolationImage_|TestKube_|TestPlan|TestModifyPlan|TestAccThreegateVerifyAction|TestAccAgentMessageAction|TestAccImagePruneAction|.*Identity|.*_identity|.*_list)'
kubeconfig=$(./scripts/k8s-up.sh)
rc=0
for cli in terraform tofu; do
  budget_var=MEEPA_${cli^^}_BUILD_BUDGET
  bin=$(scripts/tools.sh within "${!budget_var:-86400}" "$cli") || {
    status=$?
    [ "$status" -eq 3 ] && { echo "testacc-clis: SKIPPED the $cli leg (above: why)"; continue; }
    exit "$status"
  }
  env=(TF_ACC=1 MEEPA_KUBECONFIG="$kubeconfig" TF_ACC_TERRAFORM_PATH="$bin")
  # OpenTofu installs providers from its own registry's namespace.
  [ "$cli" = tofu ] && env+=(TF_ACC_PROVIDER_HOST=registry.opentofu.org)
  echo "testacc-clis: $("$bin" version 2>/dev/null | head -1)"
  t0=$SECONDS
  env "${env[@]}" go test -count=1 -p 1 -timeout 30m -run "$SUBSET" ./internal/provider/ || rc=1
  echo "testacc-clis: $cli leg took $((SECONDS - t0)) s"
done
exit "$rc"
