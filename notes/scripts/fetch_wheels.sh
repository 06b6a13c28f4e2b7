# The device's carried wheels (FA3, cuDNN frontend, SageAttention) into the ignored .whl/ (a new
# checkout has none): run here, on the CPU machine, from the repository root; then carry [".whl"].
# The device runs Python 3.12 on x86_64; fa3-fwd is an abi3 wheel for manylinux_2_24.
mkdir -p .whl
pip download -q --no-deps -d .whl --python-version 3.12 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --only-binary=:all: fa3-fwd==0.0.3 nvidia-cudnn-frontend
pip download -q --no-deps -d .whl sageattention==1.0.6
ls .whl
