# The image kube_helper_image names: the static sbx-helper alone (adr/0072). Its init
# container runs `/sbx-helper install /.sbx` as uid 1000, copying the binary into the
# pod's emptyDir "sbx", mounted read-only at /.sbx in the sandbox container.
# Build from the build output: docker build -f deploy/kubernetes/helper-image.Dockerfile build/out
FROM scratch
COPY --chmod=0555 sbx-helper /sbx-helper
