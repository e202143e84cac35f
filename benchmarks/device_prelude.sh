# Sourced by the GPU scripts (benchmarks/gpu_final.sh) from the checkout's
# root, with W set: installs the carried wheels (.whl) and this checkout into /tmp/site, points
# at the carried nsys libraries (.device-lib), prints the versions, and moves to $W, away from the
# checkout, whose ./tracelab would shadow the installed package. REPO is the checkout.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . 2>&1 | tail -2
export PYTHONPATH=/tmp/site LD_LIBRARY_PATH=$PWD/.device-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cp -r .device-lib "$W/" 2>/dev/null
. benchmarks/nsys_env.sh
REPO=$PWD
cd "$W" || exit 2
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
