# The decoding gate of {{project}}, rendered by `genguard gate --dockerfile` (pytest-genguard): the project's genguard
# tests on CUDA in a container whose exit status is the gate.
#
#   genguard gate --gpu --artifacts artifacts   # builds this image and runs it with `docker run --gpus all`
#   genguard gate --artifacts artifacts         # the same tests on the CPU (a CPU runner, a laptop before pushing)
#   genguard gate --dockerfile > Dockerfile.gate && genguard gate --file Dockerfile.gate   # your own copy of this file
#
# The build context is the one genguard gate sends (it writes nothing into the project): project/, the project less
# what its .dockerignore leaves out, and genguard-gate/: requirements.txt and no-deps.txt, the test requirements it
# resolved (pinned), wheels/, the wheels they install from (filled by the host's pip: no network inside the build;
# empty when the build may reach the index) and genguard/, the genguard that ran the command (genguard is not on the
# package index). The container runs the tests with `--genguard-gpu` and no network, as an unprivileged
# user; without a usable GPU it stops at once with a usage error: it never falls back to the CPU (genguard gate runs
# the same command minus --genguard-gpu when asked for the CPU). JUnit XML and the HTML report land in /artifacts.
#
# Base image: PyTorch 2.13.0 (the torch genguard is checked against), CUDA 12.6, cuDNN 9, runtime flavour. Pinned by
# exact tag AND by digest so a re-pushed tag cannot change the toolkit under the baselines (cuBLAS results are
# reproducible only for the same toolkit). The digest was written offline: it matches several independent public pins
# of this tag but was not resolved against Docker Hub by us. If a build reports "manifest unknown", re-resolve it with
# `docker buildx imagetools inspect pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime` and replace the digest; never drop
# it. Another base (`genguard gate --base IMAGE`) must hold a Python with torch installed, `python` on PATH.
ARG BASE_IMAGE={{base_image}}
FROM ${BASE_IMAGE}

# Determinism, set before CUDA initialises (environment variables are read at context creation):
# - CUBLAS_WORKSPACE_CONFIG: required by torch.use_deterministic_algorithms(True) for cuBLAS.
# - NVIDIA_TF32_OVERRIDE=0: no TF32 anywhere in cuBLAS/cuDNN, whatever a library asks for.
# - PYTHONHASHSEED=0: set/dict iteration order is the same on every run.
# - OMP/MKL threads = 1: CPU reductions do not depend on how many cores the runner has.
# - HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE: the tests never download; a hub call fails at once, naming the model.
ENV CUBLAS_WORKSPACE_CONFIG=:4096:8 \
    NVIDIA_TF32_OVERRIDE=0 \
    PYTHONHASHSEED=0 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Build-time only (ARG, not ENV): newer PyTorch images mark their Python as externally managed
# (PEP 668); older conda-based ones ignore this. It does not persist into the running container.
ARG PIP_BREAK_SYSTEM_PACKAGES=1
# Where pip finds packages, read by pip from the environment: the wheels genguard gate put in the context, and the
# package index unless PIP_NO_INDEX=1 (genguard gate sets it when the host's pip filled the wheels: the build then
# needs no network, and is built with none).
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS=/tmp/genguard-gate/wheels

# An unprivileged user with a fixed UID that the base image does not use (Ubuntu images ship
# `ubuntu` as UID 1000). /artifacts is where the report and traces land.
RUN useradd --no-log-init --create-home --uid 10001 --user-group genguard \
    && install -d -o genguard -g genguard /artifacts /workspace

WORKDIR /workspace

# The test requirements, in layers keyed by what genguard gate resolved from the files that declare them (pinned,
# cached by those files): a source change does not reinstall them. They are constrained to the torch the base already
# has: pip must never swap the base's CUDA build for another one. The constraint is the installed distribution's
# version (importlib.metadata): torch.__version__ of PyPI's CUDA build is 2.13.0+cu130 while its distribution is
# 2.13.0, and pip cannot satisfy torch==2.13.0+cu130. The last line proves the base's torch (version and CUDA build)
# survived.
COPY genguard-gate/requirements.txt genguard-gate/no-deps.txt /tmp/genguard-gate/
COPY genguard-gate/wheels /tmp/genguard-gate/wheels
RUN python -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" \
        > /tmp/genguard-gate/torch-constraint.txt \
    && python -c "import importlib.metadata as m, torch; print(m.version('torch'), torch.version.cuda)" \
        > /tmp/genguard-gate/torch-before.txt \
    && python -m pip install --no-cache-dir --quiet --constraint /tmp/genguard-gate/torch-constraint.txt \
        --requirement /tmp/genguard-gate/requirements.txt \
    && if [ -s /tmp/genguard-gate/no-deps.txt ]; then python -m pip install --no-cache-dir --quiet --no-deps \
        --requirement /tmp/genguard-gate/no-deps.txt; fi \
    && python -c "import importlib.metadata as m, torch; print(m.version('torch'), torch.version.cuda)" \
        > /tmp/genguard-gate/torch-after.txt \
    && cmp /tmp/genguard-gate/torch-before.txt /tmp/genguard-gate/torch-after.txt
{{genguard_layer}}
{{package_layer}}

# The project's name last: the layers above are shared by every project with the same requirements.
LABEL org.opencontainers.image.title="{{project}} decoding gate" \
      org.opencontainers.image.description="Runs {{project}}'s genguard tests; non-zero exit means a decoding regression."

# The gate: the project's selection (its testpaths, or [tool.genguard.gate] args) on the GPU; genguard gate runs this
# same command minus --genguard-gpu on the CPU, and appends its `-- ARGS`. The report and the JUnit XML land in
# /artifacts.
{{cmd}}
