"""Docker wrapping: brand keys, image precedence, GPU flags, mounts (SCHEMA.md 7, quirks 11.4-11.6)."""

from __future__ import annotations

import pytest

from vllm_fleet import images as dk

DM = "test-org/Docker-Model"
HF = ["-v", "~/.cache/huggingface:/root/.cache/huggingface"]


@pytest.fixture
def image(render):
    def run(hw, variant="default", recipe=None):
        p = render(DM, recipe=recipe, variant=variant, hardware=hw, strategy="single_node_tp").processes[0]
        return p.docker["image"], p.docker["brand_key"]
    return run


# -- brand key ---------------------------------------------------------------------

@pytest.mark.parametrize("hw, key", [
    ("h200", "nvidia"), ("gb200", "nvidia"), ("mi300x", "amd"), ("trillium", "tpu"),
    ("xeon6", "intel"), ("arc_pro_b60", "intel"), ("ascend_950pr", "nvidia"),
])
def test_brand_key(catalog, hw, key):
    assert dk.brand_key(catalog.profiles[hw]) == key


def test_brand_key_rules_on_synthetic_profiles():
    assert dk.brand_key({"brand": "AMD", "generation": "tpu"}) == "tpu"         # tpu generation first
    assert dk.brand_key({"brand": "Other", "generation": "xpu"}) == "intel"     # cpu/xpu generation
    assert dk.brand_key({"brand": "Intel", "generation": "gaudi"}) == "intel"   # or brand Intel
    assert dk.brand_key({}) == "nvidia"


# -- image precedence ----------------------------------------------------------------

@pytest.mark.parametrize("hw, variant, expected", [
    ("h200", "default", ("test/vllm:cu130", "nvidia")),                     # model CUDA map: cu130 > cu129
    ("mi300x", "default", ("test/rocm:pinned", "amd")),                     # model brand map
    ("trillium", "default", ("vllm/vllm-tpu:latest", "tpu")),               # no tpu key -> default
    ("xeon6", "default", ("vllm/vllm-openai-cpu:latest-x86_64", "intel")),
    ("arc_pro_b60", "default", ("vllm/vllm-openai-xpu:latest", "intel")),   # XPU default
    ("ascend_950pr", "default", ("test/vllm:cu130", "nvidia")),             # quirk 11.5
    ("h200", "pinned", ("test/vllm:variant-pin", "nvidia")),                # variant pin > model
    ("mi300x", "pinned", ("docker pull vllm/vllm-openai-rocm:nightly", "amd")),  # exact id > variant (11.4)
    ("trillium", "pinned", ("vllm/vllm-tpu:latest", "tpu")),                # a string pins only nvidia
    ("ascend_950pr", "pinned", ("test/ascend:pin", "nvidia")),
    ("h200", "partial", ("test/vllm:cu130", "nvidia")),                     # partial variant map falls back
    ("mi300x", "partial", ("test/rocm:variant", "amd")),
])
def test_image_precedence(image, hw, variant, expected):
    assert image(hw, variant) == expected


def test_cuda_map_is_reported(render):
    p = render(DM, hardware="h200", strategy="single_node_tp").processes[0]
    assert p.docker["cuda_map"] == {"cu129": "test/vllm:cu129", "cu130": "test/vllm:cu130"}
    pinned = render(DM, variant="pinned", hardware="h200", strategy="single_node_tp").processes[0]
    assert "cuda_map" not in pinned.docker


def test_bare_cuda_map_applies_to_nvidia_only_and_falls_back_to_cu129(image, recipe_copy):
    recipe = recipe_copy(DM)
    recipe["model"]["docker_image"] = {"cu129": "test/vllm:only-cu129"}
    assert image("h200", recipe=recipe) == ("test/vllm:only-cu129", "nvidia")
    assert image("mi300x", recipe=recipe) == ("vllm/vllm-openai-rocm:latest", "amd")


def test_model_string_pins_nvidia_only(image, recipe_copy):
    recipe = recipe_copy(DM)
    recipe["model"]["docker_image"] = "test/vllm:string"
    assert image("h200", recipe=recipe)[0] == "test/vllm:string"
    assert image("mi300x", recipe=recipe)[0] == "vllm/vllm-openai-rocm:latest"


@pytest.mark.parametrize("hw, expected", [
    ("h200", "vllm/vllm-openai:nightly"),
    ("mi300x", "vllm/vllm-openai-rocm:nightly"),
    ("trillium", "vllm/vllm-tpu:nightly"),
    ("arc_pro_b60", "vllm/vllm-openai-xpu:latest"),     # XPU ignores nightly
    ("xeon6", None),                                    # intel has no nightly default
])
def test_nightly_required_defaults(image, recipe_copy, hw, expected):
    recipe = recipe_copy(DM)
    del recipe["model"]["docker_image"]
    recipe["model"]["nightly_required"] = True
    assert image(hw, recipe=recipe)[0] == expected


def test_nightly_does_not_override_a_pin(image, recipe_copy):
    recipe = recipe_copy(DM)
    recipe["model"]["nightly_required"] = True
    assert image("h200", recipe=recipe)[0] == "test/vllm:cu130"


def test_undefined_image_text_in_docker_argv(render, recipe_copy):
    recipe = recipe_copy(DM)
    del recipe["model"]["docker_image"]
    recipe["model"]["nightly_required"] = True
    p = render(DM, recipe=recipe, hardware="xeon6", strategy="single_node_tp").processes[0]
    assert p.docker_argv()[-4:] == ["undefined", "test-org/Docker-Model", "--tensor-parallel-size", "1"]


# -- docker argv per brand -------------------------------------------------------------

@pytest.mark.parametrize("hw, flags, img", [
    ("h200", ["--gpus", "all"], "test/vllm:cu130"),
    ("ascend_950pr", ["--gpus", "all"], "test/vllm:cu130"),
    ("mi300x", ["--device=/dev/kfd", "--device=/dev/dri", "--security-opt", "seccomp=unconfined",
                "--group-add", "video"], "test/rocm:pinned"),
    ("trillium", ["--privileged", "--network", "host", "-v", "/dev/shm:/dev/shm"], "vllm/vllm-tpu:latest"),
    ("arc_pro_b60", ["--device", "/dev/dri", "-v", "/dev/dri/by-path:/dev/dri/by-path", "--shm-size", "16g"],
     "vllm/vllm-openai-xpu:latest"),
    ("xeon6", ["--shm-size", "16g"], "vllm/vllm-openai-cpu:latest-x86_64"),
])
def test_docker_argv_per_brand(render, hw, flags, img):
    p = render(DM, hardware=hw, strategy="single_node_tp").processes[0]
    tp = p.argv[-1]
    assert p.docker_argv() == ["docker", "run", *flags, "--privileged", "--ipc=host", "-p", "8000:8000", *HF,
                               "-e", "DOCKER_ENV=a b", img, "test-org/Docker-Model",
                               "--tensor-parallel-size", tp]


def test_tpu_carries_privileged_twice(render):
    p = render(DM, hardware="trillium", strategy="single_node_tp").processes[0]
    assert p.docker_argv().count("--privileged") == 2


def test_docker_command_shell_forms(render):
    nv = render(DM, hardware="h200", strategy="single_node_tp").processes[0]
    assert nv.docker_command() == (
        "docker run --gpus all \\\n"
        "  --privileged --ipc=host -p 8000:8000 \\\n"
        "  -v ~/.cache/huggingface:/root/.cache/huggingface \\\n"
        "  -e DOCKER_ENV='a b' \\\n"
        "  test/vllm:cu130 test-org/Docker-Model \\\n"
        "  --tensor-parallel-size 1")
    amd = render(DM, hardware="mi300x", strategy="single_node_tp").processes[0]
    assert amd.docker_command().startswith(
        "docker run --device=/dev/kfd --device=/dev/dri \\\n"
        "  --security-opt seccomp=unconfined --group-add video \\\n"
        "  --privileged --ipc=host -p 8000:8000 \\\n")
    xpu = render(DM, hardware="arc_pro_b60", strategy="single_node_tp").processes[0]
    assert xpu.docker_command().startswith(
        "docker run --device /dev/dri -v /dev/dri/by-path:/dev/dri/by-path --shm-size=16g \\\n")
    cpu = render(DM, hardware="xeon6", strategy="single_node_tp").processes[0]
    assert cpu.docker_command().startswith("docker run --shm-size=16g \\\n  --privileged --ipc=host")


def test_local_model_path_is_bind_mounted_read_only(render):
    p = render(DM, variant="local", hardware="h200", strategy="single_node_tp").processes[0]
    assert p.argv[2] == "/models/local-weights"
    assert p.docker_argv()[8:15] == [*HF, "-v", "/models/local-weights:/models/local-weights:ro",
                                     "-e", "DOCKER_ENV=a b", "test/vllm:cu130"]
    assert p.docker_command().startswith(
        "# /models/local-weights must already exist on the host")
    assert "\n  -v /models/local-weights:/models/local-weights:ro \\\n" in p.docker_command()


def test_placeholders_stay_literal_in_docker_argv(render):
    # quirk 11.6: ~ and $PLACEHOLDER text is left for a shell to expand
    w = render("test-org/Moe-Model", hardware="h200", strategy="multi_node_tp", node_count=2).find("worker", 1)
    d = w.docker_argv()
    assert "~/.cache/huggingface:/root/.cache/huggingface" in d
    assert d[d.index("--master-addr") + 1] == "$HEAD_IP"
    assert ["-e", "GLOO_SOCKET_IFNAME=$IFACE_NAME"] == d[10:12]


# -- helpers -----------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [(0, "0"), (True, "true"), (False, "false"), (None, "null"),
                                         (1.0, "1"), (1.5, "1.5"), ("x", "x")])
def test_env_text_follows_js_string(value, text):
    assert dk.env_text(value) == text


def test_docker_meta_function_directly():
    recipe = {"model": {"docker_image": {"nvidia": {"cu129": "a"}, "tpu": "t"}}}
    assert dk.docker_meta(recipe, {}, "x", {"brand": "NVIDIA", "generation": "hopper"}) == {
        "image": "a", "brand_key": "nvidia", "cuda_map": {"cu129": "a"}}
    assert dk.docker_meta(recipe, {}, "x", {"brand": "Google", "generation": "tpu"}) == {
        "image": "t", "brand_key": "tpu"}
    variant = {"hardware_overrides": {"x": {"docker_image": "exact"}}, "docker_image": "v"}
    assert dk.docker_meta(recipe, variant, "x", {"brand": "Google", "generation": "tpu"})["image"] == "exact"
