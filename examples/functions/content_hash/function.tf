# A base pinned by its image id: the content hash, and so both tags, follow
# from the configuration alone.
locals {
  base_id  = "sha256:5b0f0f0c1f6c9a4f0e5d1a7b8c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
  packages = ["python3", "jq"]
  hash     = provider::meepa::content_hash(local.base_id, local.packages, "apt", { LANG = "C.UTF-8" })
}

output "container_image" {
  value = "meepa-sandbox:${local.hash}"
}

output "isolated_image" {
  value = provider::meepa::isolated_image("meepa-sandbox:${local.hash}")
}
