# The import id is the isolation image's tag (the isolated_image attribute),
# meepagateway-isolated:{version}-{base}. Everything else is read back from
# the image's io.meepa.* labels; pull and keep_locally take their defaults.
# With Terraform 1.12+ an import block can name it by identity instead:
#   identity = { isolated_image = "meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b3d4e" }
terraform import meepa_isolation_image.python meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b3d4e
