"""The NVIDIA driver against the CUDA version of the vLLM build a plan runs (no Ansible imports).

Two tables, each row with its source:

* :data:`VLLM_CUDA`: vLLM release -> the CUDA version of its default build (the PyPI wheel
  ``pip install vllm`` and the ``vllm/vllm-openai:vX.Y.Z`` image). A release between two rows
  has the earlier row's CUDA (a default moves at one release and stays).
* :data:`CUDA_DRIVER`: CUDA version -> the minimum Linux x86_64 driver, from NVIDIA's CUDA
  Toolkit release notes, table "CUDA Toolkit and Corresponding Driver Versions" (the GA row of
  each release).

What is refused, and why not more. NVIDIA's CUDA *minor version compatibility* lets a build for
CUDA X.y run on any driver of major X from the X.0 floor on (NVIDIA's data center support matrix,
https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html:
R535 and R570 "support CUDA 12.x (through CUDA minor version compatibility)", R580 CUDA 13.x;
vllm-project/vllm issue 44335: a cu129 vLLM build "works for me on CUDA 12.8"). So a driver older
than the build's own toolkit row is not a sure failure, and the planner must not refuse a host
that would serve. :func:`check` refuses what cannot start: a driver whose CUDA major is older
than the build's (a CUDA 13 build on an R570 driver: ``libcudart.so.13`` cannot initialise), or
one below the minor-compatibility floor of the build's major (the X.0 row). Its message names the
build's full toolkit minimum, the driver to upgrade to.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

# vLLM release (first release with that default) -> CUDA version of its default wheel / image.
VLLM_CUDA: Tuple[Tuple[Tuple[int, int, int], str], ...] = (
    # PyPI wheel built with CUDA 12.1 from v0.2.2 on: vllm-project/vllm issue 1589 ("PyPi: torch
    # 2.1.0 and CUDA 12.1.1 wheel"); docs.vllm.ai v0.3.3 .. v0.6.6.post1 installation pages
    # ("binaries are compiled with CUDA 12.1 ... by default"). v0.9.0's notes say the default was
    # 12.4 before it; the release that moved 12.1 -> 12.4 is not sourced here, so 0.2.2 .. 0.8.x
    # keep 12.1 (the lower value: it refuses less).
    ((0, 2, 2), "12.1"),
    # v0.9.0 release notes ("The default wheel has been upgraded from CUDA 12.4 to CUDA 12.8",
    # PyTorch 2.7; vllm-project/vllm PR 16859 "Update the release pipeline to build with CUDA 12.8").
    ((0, 9, 0), "12.8"),
    # v0.11.1 release notes ("Updated the default CUDA build to torch==2.9.0+cu129", quoted on
    # discuss.vllm.ai "Clarify vLLM wheels: what does the +cu129 tag actually change in v0.11.x");
    # vllm-project/vllm PR 34867 (v0.16.0: "vLLM wheels have been built on CUDA 12.9", the
    # container needs 12.9). Unsure: issue 34296 shows a v0.15.1 image with
    # NVIDIA_REQUIRE_CUDA=cuda>=12.8; either way CUDA 12, which is all check() judges.
    ((0, 11, 1), "12.9"),
    # v0.20.0: CUDA 13.0 is the unsuffixed default wheel and image (vllm-project/vllm PR 39878
    # "Switch default CUDA to 13.0": `vllm-openai:latest` = CUDA 13.0, the 12.9 build becomes the
    # `-cu129` / `+cu129` variant; vast-ai/base-image PR 158 and ai-dynamo/nixl PR 2140: "Starting
    # with vLLM v0.20.0, CUDA 13 became the default").
    ((0, 20, 0), "13.0"),
)

# CUDA version -> minimum Linux x86_64 driver (NVIDIA CUDA Toolkit release notes, "CUDA Toolkit
# and Corresponding Driver Versions", GA rows; docs.nvidia.com/cuda/cuda-toolkit-release-notes).
# Checked in this change against a second source: 12.6 -> 560.28.03 and 13.0 -> 580.65.06 (both
# also the min_nvidia_driver_linux of a published CUDA 12.6 / 13.0 build manifest). The other rows
# are the table's values as known to the author, not re-read from NVIDIA's page in this change
# (unsure: verify against the current release notes before relying on a row other than the X.0
# floors check() refuses by). 12.8 / 12.9 / 13.0 are the first drivers of branches R570 / R575 / R580.
CUDA_DRIVER: Tuple[Tuple[str, str], ...] = (
    ("11.8", "520.61.05"),
    ("12.0", "525.60.13"),
    ("12.1", "530.30.02"),
    ("12.2", "535.54.03"),
    ("12.3", "545.23.06"),
    ("12.4", "550.54.14"),
    ("12.5", "555.42.02"),
    ("12.6", "560.28.03"),
    ("12.8", "570.26"),
    ("12.9", "575.51.03"),
    ("13.0", "580.65.06"),
)

_CU_TAG = re.compile(r"(?:^|[-+_])cu(\d{2})(\d)(?:$|[-+_.])")


def _tuple(text: Any) -> Optional[Tuple[int, ...]]:
    match = re.match(r"^v?(\d+(?:\.\d+)*)", str(text or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _tag(image: Optional[str]) -> str:
    """The tag of an image reference ('' without one)."""
    return image.rsplit(":", 1)[1] if image and ":" in image.rsplit("/", 1)[-1] else ""


def _since(table: Tuple[Tuple[Tuple[int, int, int], str], ...], version: Tuple[int, ...]) -> Optional[str]:
    """The value of the table's last row whose first release is ``version`` or older (None: older
    than the table)."""
    version = (version + (0, 0, 0))[:3]
    found = None
    for first, value in table:
        if version >= first:
            found = value
    return found


def build_cuda(vllm_version: Any, image: Optional[str] = None) -> Optional[str]:
    """The CUDA version of the build: an explicit ``cuNNN`` in the image tag or the version
    (``v0.20.0-cu129``, ``0.20.0+cu129``), else the table's row for the release; None when the
    release is unknown (no version, ``latest``, a version older than the table)."""
    tag = _tag(image)
    for text in (tag, str(vllm_version or "")):
        match = _CU_TAG.search(text)
        if match:
            return f"{int(match.group(1))}.{match.group(2)}"
    version = _tuple(vllm_version) or _tuple(tag)
    return _since(VLLM_CUDA, version) if version else None


def min_driver(cuda: str) -> Optional[str]:
    """The minimum Linux driver of a CUDA version (its toolkit row; a version between rows has
    the next row's minimum, one newer than the table None)."""
    want = _tuple(cuda)
    for version, driver in CUDA_DRIVER:
        if _tuple(version) >= want:
            return driver
    return None


def check(plan_vllm_version: Any, image: Optional[str], driver_version: Any,
          driver_cuda: Any) -> Optional[str]:
    """Why the host's NVIDIA driver cannot run the plan's vLLM build, or None.

    ``plan_vllm_version``: the plan's vLLM version (pinned or from the image tag); ``image``:
    the docker image (None for uv); ``driver_version`` / ``driver_cuda``: the GPU facts'
    ``driver_version`` and ``cuda_version`` (the CUDA version the driver supports, nvidia-smi's
    header). None when the build's CUDA is unknown (no version, ``latest``, a release older than
    the table) or the driver is not read: nothing is judged then. Refused: a driver of an older
    CUDA major than the build's, or one below the build major's minor-compatibility floor (see
    the module's docstring: an older driver of the same major serves through CUDA minor version
    compatibility, so it is not refused)."""
    cuda = build_cuda(plan_vllm_version, image)
    have = _tuple(driver_version)
    if cuda is None or have is None:
        return None
    need_major = _tuple(cuda)[0]
    floor = min_driver(f"{need_major}.0")
    supports = _tuple(driver_cuda)
    too_old_major = supports is not None and supports[0] < need_major
    below_floor = floor is not None and have < _tuple(floor)
    if not (too_old_major or below_floor):
        return None
    need = min_driver(cuda) or floor
    build = f"vLLM {plan_vllm_version}" if plan_vllm_version else "the vLLM build"
    return (f"driver {driver_version} supports CUDA {driver_cuda or 'unknown'}; {build}"
            f"{' (' + image + ')' if image else ''} is built for CUDA {cuda}, which needs driver >= {need}"
            f"{' (at least ' + floor + ', CUDA ' + str(need_major) + ' minor version compatibility)' if floor and floor != need else ''}"
            f": upgrade the driver or pin an older vllm_fleet_vllm_version")


# vLLM release -> the oldest host ROCm it supports (AMD). Sources: docs.vllm.ai v0.4.0.post1 and
# v0.5.1 "Installation with ROCm" ("ROCm 5.7 and 6.0"); the current docs
# (vllm-project/vllm docs/getting_started/installation/gpu.rocm.inc.md: "vLLM supports AMD GPUs with
# ROCm 6.3 or above", prebuilt rocm700 wheels for 0.14.0 to 0.18.0). Unsure: the release that raised
# the floor to 6.3 is not sourced; it is placed at 0.14.0 (the first release of that wheel table),
# the late side, so that no release is held to a floor it may not have had.
VLLM_ROCM: Tuple[Tuple[Tuple[int, int, int], str], ...] = (
    ((0, 2, 4), "5.7"),
    ((0, 14, 0), "6.3"),
)


def rocm_check(plan_vllm_version: Any, image: Optional[str], rocm_version: Any) -> Optional[str]:
    """Why the host's ROCm is older than the vLLM release supports, or None (also when the release
    or the host's ROCm version is unknown: nothing is judged then)."""
    version = _tuple(plan_vllm_version) or _tuple(_tag(image))
    have = _tuple(rocm_version)
    if not version or not have:
        return None
    need = _since(VLLM_ROCM, version)
    if need is None or have >= _tuple(need):
        return None
    build = f"vLLM {plan_vllm_version}" if plan_vllm_version else "the vLLM build"
    return (f"the host has ROCm {rocm_version}; {build}{' (' + image + ')' if image else ''} supports ROCm "
            f">= {need}: upgrade ROCm or pin an older vllm_fleet_vllm_version")
