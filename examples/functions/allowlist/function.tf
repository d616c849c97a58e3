# The list the egress proxy will enforce, in its canonical form: a module can
# compare it, or merge two lists without duplicates, before anything runs.
output "allow" {
  value = provider::meepa::allowlist(concat(
    ["api.github.com", "*.pythonhosted.org"],
    ["API.GitHub.com.", "pypi.org:443"],
  ))
  # ["api.github.com:443", "*.pythonhosted.org:443", "pypi.org:443"]
}
