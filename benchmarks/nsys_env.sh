# Sourced by the GPU scripts, with W set (their work folder): tracelab finds nsys on the PATH or
# at $TRACELAB_NSYS. The lent GPU machines have it only inside Nsight Compute, and that copy
# needs its host libraries, plus libdw/libelf carried in .device-lib, on LD_LIBRARY_PATH:
# $W/nsys is a wrapper that sets them and runs it.
NSYS_HOST=/opt/nvidia/nsight-compute/2025.3.1/host
if ! command -v nsys >/dev/null 2>&1 && [ -x "$NSYS_HOST/target-linux-x64/nsys" ]; then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s:%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$PWD/.device-lib" "$NSYS_HOST/linux-desktop-glibc_2_11_3-x64" "$NSYS_HOST/target-linux-x64/nsys" > "$W/nsys"
  chmod +x "$W/nsys"
  export TRACELAB_NSYS=$W/nsys
fi
