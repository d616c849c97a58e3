#!/usr/bin/env bash
# Generates docs/ with tfplugindocs.
#
# tfplugindocs assumes every resource name starts with the provider's name,
# but this provider serves two prefixes: meepa_* and threegate_*. So the
# schema is read once from the real terraform CLI, split by prefix, and
# tfplugindocs runs once per prefix with that prefix as the provider name:
#   meepa_*      -> docs/index.md, docs/resources/<short>.md, docs/guides/
#   threegate_*  -> docs/resources/threegate_<short>.md (full name kept, since
#                   the registry strips only the provider's own prefix)
# Templates for the second run live under templates/ like any other, named by
# the full type name (templates/resources/threegate_network.md.tmpl).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
# tfplugindocs joins its directory flags onto the provider directory, so the
# second run's templates and output must live inside the repository.
work=.docs-work
rm -rf "$work"
trap 'rm -rf "$tmp" "$work"' EXIT

CGO_ENABLED=0 go build -o "$tmp/bin/terraform-provider-meepa" .
cat >"$tmp/tfrc" <<RC
provider_installation {
  dev_overrides {
    "bogpad/meepa" = "$tmp/bin"
  }
  direct {}
}
RC
mkdir -p "$tmp/cfg"
cat >"$tmp/cfg/main.tf" <<'TF'
terraform {
  required_providers {
    meepa = { source = "bogpad/meepa" }
  }
}
TF
(cd "$tmp/cfg" && TF_CLI_CONFIG_FILE="$tmp/tfrc" terraform providers schema -json 2>/dev/null) >"$tmp/full.json"

# split PREFIX: the schema of the resources, data sources and ephemeral
# resources whose names start with PREFIX_, under the provider key PREFIX.
# Functions are called provider::meepa::…, so only the meepa run documents
# them.
split() {
  jq --arg p "$1" '
    def pick: with_entries(select(.key | startswith($p + "_")));
    .provider_schemas |= { ($p): (to_entries[0].value
      | .resource_schemas = ((.resource_schemas // {}) | pick)
      | .data_source_schemas = ((.data_source_schemas // {}) | pick)
      | .ephemeral_resource_schemas = ((.ephemeral_resource_schemas // {}) | pick)
      | if $p == "meepa" then . else del(.functions) end) }' "$tmp/full.json"
}
split meepa >"$tmp/meepa.json"
split threegate >"$tmp/threegate.json"

rm -rf docs
go tool tfplugindocs generate --provider-name meepa --rendered-provider-name meepa \
  --providers-schema "$tmp/meepa.json" --website-source-dir templates \
  --website-temp-dir "$tmp/web-meepa" --rendered-website-dir docs >/dev/null

# Second run: its templates are the threegate_* ones, with the prefix taken
# off the file names the way tfplugindocs expects them.
mkdir -p "$work/tpl-threegate"
for kind in resources data-sources; do
  for f in templates/$kind/threegate_*.md.tmpl; do
    [ -e "$f" ] || continue
    mkdir -p "$work/tpl-threegate/$kind"
    cp "$f" "$work/tpl-threegate/$kind/$(basename "$f" | sed 's/^threegate_//')"
  done
done
go tool tfplugindocs generate --provider-name threegate --rendered-provider-name meepa \
  --providers-schema "$tmp/threegate.json" --website-source-dir "$work/tpl-threegate" \
  --website-temp-dir "$tmp/web-threegate" --rendered-website-dir "$work/out-threegate" >/dev/null
for kind in resources data-sources; do
  for f in "$work/out-threegate/$kind"/*.md; do
    [ -e "$f" ] || continue
    mkdir -p "docs/$kind"
    cp "$f" "docs/$kind/threegate_$(basename "$f")"
  done
done
echo "docs: generated $(find docs -name '*.md' | wc -l) pages"
