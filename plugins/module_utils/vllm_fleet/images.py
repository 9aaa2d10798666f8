"""Docker image choice and the upstream-compatible ``docker run`` rendering per GPU brand."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .shell import quote, shell_command

HF_CACHE_MOUNT = "~/.cache/huggingface:/root/.cache/huggingface"

DEFAULT_IMAGES = {
    "nvidia": "vllm/vllm-openai:latest",
    "amd": "vllm/vllm-openai-rocm:latest",
    "tpu": "vllm/vllm-tpu:latest",
    "intel": "vllm/vllm-openai-cpu:latest-x86_64",
}
NIGHTLY_IMAGES = {
    "nvidia": "vllm/vllm-openai:nightly",
    "amd": "vllm/vllm-openai-rocm:nightly",
    "tpu": "vllm/vllm-tpu:nightly",
}
XPU_IMAGE = "vllm/vllm-openai-xpu:latest"
CUDA_KEYS = ("cu130", "cu129")
BRAND_KEYS = ("nvidia", "amd", "tpu", "intel")

# GPU access flags per brand key: (argv tokens, shell lines after "docker run").
_GPU_FLAGS: Dict[str, Tuple[List[str], List[str]]] = {
    "nvidia": (["--gpus", "all"], ["--gpus all"]),
    "amd": (
        ["--device=/dev/kfd", "--device=/dev/dri", "--security-opt", "seccomp=unconfined",
         "--group-add", "video"],
        ["--device=/dev/kfd --device=/dev/dri", "--security-opt seccomp=unconfined --group-add video"],
    ),
    "tpu": (
        ["--privileged", "--network", "host", "-v", "/dev/shm:/dev/shm"],
        ["--privileged --network host -v /dev/shm:/dev/shm"],
    ),
    "xpu": (
        ["--device", "/dev/dri", "-v", "/dev/dri/by-path:/dev/dri/by-path", "--shm-size", "16g"],
        ["--device /dev/dri -v /dev/dri/by-path:/dev/dri/by-path --shm-size=16g"],
    ),
    "cpu": (["--shm-size", "16g"], ["--shm-size=16g"]),
}


def brand_key(profile: Mapping[str, Any]) -> str:
    """Upstream's docker brand key: tpu, amd, intel or nvidia (Huawei falls to nvidia)."""
    gen = generation(profile)
    brand = profile.get("brand")
    if gen == "tpu":
        return "tpu"
    if brand == "AMD":
        return "amd"
    if gen in ("cpu", "xpu") or brand == "Intel":
        return "intel"
    return "nvidia"


def generation(profile: Mapping[str, Any]) -> Optional[str]:
    gen = profile.get("generation", profile.get("gpu_generation"))
    if isinstance(gen, list):
        return gen[0] if gen else None
    return gen


def _is_cuda_map(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(k in CUDA_KEYS for k in value)


def _from_source(source: Any, key: str) -> Tuple[Optional[str], Optional[dict]]:
    """Image a docker_image value pins for ``key``, with the CUDA map it came from."""
    if not source:
        return None, None
    if isinstance(source, str):
        return (source, None) if key == "nvidia" else (None, None)
    if not isinstance(source, dict):
        return None, None
    if _is_cuda_map(source):
        return (_cuda_pick(source), source) if key == "nvidia" else (None, None)
    value = source.get(key)
    if isinstance(value, str) and value:
        return value, None
    if key == "nvidia" and _is_cuda_map(value):
        return _cuda_pick(value), value
    return None, None


def _cuda_pick(cmap: Mapping[str, str]) -> Optional[str]:
    return cmap.get("cu130") or cmap.get("cu129")


def docker_meta(recipe: Mapping[str, Any], variant: Mapping[str, Any], hw_id: Optional[str],
                profile: Mapping[str, Any]) -> Dict[str, Any]:
    """Pick the image: exact-GPU variant pin > variant pin > model pin > brand default."""
    key = brand_key(profile)
    model = recipe.get("model") or {}
    hw_pin = ((variant.get("hardware_overrides") or {}).get(hw_id) or {}).get("docker_image") if hw_id else None
    image: Optional[str] = None
    cuda_map: Optional[dict] = None
    if isinstance(hw_pin, str) and hw_pin:
        image = hw_pin
    else:
        for source in (variant.get("docker_image"), model.get("docker_image")):
            image, cuda_map = _from_source(source, key)
            if image:
                break
    if not image:
        cuda_map = None
        if generation(profile) == "xpu":
            image = XPU_IMAGE
        elif model.get("nightly_required"):
            image = NIGHTLY_IMAGES.get(key)
        else:
            image = DEFAULT_IMAGES[key]
    meta: Dict[str, Any] = {"image": image, "brand_key": key}
    if cuda_map is not None:
        meta["cuda_map"] = dict(cuda_map)
    return meta


def _flag_key(profile: Mapping[str, Any]) -> str:
    key = brand_key(profile)
    if key == "intel":
        return "xpu" if generation(profile) == "xpu" else "cpu"
    return key


def env_text(value: Any) -> str:
    """How an env value prints inside ``-e K=V`` (JS String())."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _mounts(model_id: str, env: Mapping[str, Any]) -> List[str]:
    out: List[str] = []
    if model_id.startswith("/"):
        out.append(f"{model_id}:{model_id}:ro")
    for key, value in env.items():
        if key.endswith("_CONFIG_PATH"):
            text = env_text(value)
            out.append(f"{text}:{text}:ro")
    return out


def docker_argv(profile: Mapping[str, Any], image: Optional[str], argv: Sequence[str],
                env: Mapping[str, Any], port: int) -> List[str]:
    """``docker run`` argv as upstream prints it (the image entrypoint is ``vllm serve``)."""
    flags, _ = _GPU_FLAGS[_flag_key(profile)]
    out = ["docker", "run", *flags, "--privileged", "--ipc=host", "-p", f"{port}:{port}",
           "-v", HF_CACHE_MOUNT]
    for mount in _mounts(argv[2] if len(argv) > 2 else "", env):
        out += ["-v", mount]
    for key, value in env.items():
        out += ["-e", f"{key}={env_text(value)}"]
    out.append(image if image is not None else "undefined")
    out += list(argv[2:])
    return out


def docker_command(profile: Mapping[str, Any], image: Optional[str], argv: Sequence[str],
                   env: Mapping[str, Any], port: int) -> str:
    """Shell form of :func:`docker_argv`, for humans (never executed)."""
    _, shell_flags = _GPU_FLAGS[_flag_key(profile)]
    model_id = argv[2] if len(argv) > 2 else ""
    head = "docker run " + shell_flags[0]
    lines = shell_flags[1:] + [f"--privileged --ipc=host -p {port}:{port}", f"-v {HF_CACHE_MOUNT}"]
    lines += [f"-v {m}" for m in _mounts(model_id, env)]
    lines += [f"-e {k}={quote(env_text(v))}" for k, v in env.items()]
    img = image if image is not None else "undefined"
    body = shell_command(f"{img} {model_id}", list(argv[3:]))
    text = " \\\n  ".join([head] + lines + [body])
    if model_id.startswith("/"):
        text = (f"# {model_id} must already exist on the host \u2014 bind-mounted read-only below.\n"
                + text)
    return text
