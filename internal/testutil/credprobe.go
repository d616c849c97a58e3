package testutil

import "strings"

// CredentialProbe is a shell command, run as an agent's tool, that looks
// for a credential everywhere a tool can look: its environment, the argv
// and environment of the agent loop (its parent) and of the loop's parent
// (the runner, in host mode), the files of the workspace, /tmp and the
// relay mount, and the readable memory of the loop and its parent through
// /proc/<pid>/mem. It prints every string that starts with prefix (the
// credential's first characters, so that the command itself never holds
// the credential) and every relay token it finds in the loop's memory,
// between "== <what>" headers. The caller checks the output for the whole
// credential; a relay token found in memory shows the memory probe could
// read (it would otherwise pass for want of access).
func CredentialProbe(prefix string) string {
	const script = `pat='PREFIX[0-9A-Za-z_-]*'
p=$PPID
pp=$(awk '/^PPid:/{print $2}' /proc/$p/status)
echo "== env"; env | grep -ao "$pat"
for q in $p $pp; do
  echo "== argv $q"; tr '\0' '\n' < /proc/$q/cmdline 2>&1 | grep -ao "$pat"
  echo "== environ $q"; tr '\0' '\n' < /proc/$q/environ 2>&1 | grep -ao -e "$pat" -e 'Permission denied'
done
echo "== files"; grep -rao "$pat" "$HOME" /tmp /run/meepa 2>/dev/null
for q in $p $pp; do
  echo "== mem $q"
  n=0
  while read -r range perms rest; do
    case "$perms" in r*) ;; *) continue ;; esac
    s=$((0x${range%-*})); e=$((0x${range#*-}))
    dd if=/proc/$q/mem bs=65536 iflag=skip_bytes,count_bytes skip=$s count=$((e - s)) 2>/dev/null
  done < /proc/$q/maps | grep -ao -e "$pat" -e 'meepa-relay-[0-9a-f]\{64\}' | sort -u
done
echo "== end"`
	return strings.ReplaceAll(script, "PREFIX", prefix)
}
