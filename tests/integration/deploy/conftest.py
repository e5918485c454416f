"""The deployment tests' images, built once per session from local Debian images (the project's
image as the chart's defaults name it; Redis and etcd from Debian's packages), and the chart's
pods, once per module."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import yaml
from containers import (
    BUILD_BASE,
    DATASTORES,
    ROOT,
    RUN_BASE,
    build_image,
    ensure_bases,
    require_podman,
)
from kubelet import Kubelet, render_chart
from release import CHART_VALUES


def chart_image() -> str:
    """The image the chart's default values pull: repository, tag = the chart's appVersion."""
    values = yaml.safe_load((ROOT / "helm" / "streamgate" / "values.yaml").read_text())
    chart = yaml.safe_load((ROOT / "helm" / "streamgate" / "Chart.yaml").read_text())
    return f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"


@pytest.fixture(scope="session")
def image(report_missing: Callable[[str], NoReturn]) -> str:
    """The project's image, tagged as the chart's defaults name it; the datastores' image beside
    it (``DATASTORES``)."""
    require_podman(report_missing)
    started = time.monotonic()
    ensure_bases(RUN_BASE, BUILD_BASE, DATASTORES)
    bases_s = time.monotonic() - started
    tag = chart_image()
    build_image(tag)
    image_s = time.monotonic() - started - bases_s
    print(f"Debian images {bases_s:.0f} s, project image {image_s:.0f} s")
    return tag


@pytest.fixture(scope="module")
def kube(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    """The chart rendered with ``CHART_VALUES``, every pod running and ready; one per module."""
    objects, namespace = render_chart(CHART_VALUES)
    with Kubelet(objects, Path(tmp_path_factory.mktemp("kube")), namespace) as kubelet:
        print(kubelet.start_chart())
        yield kubelet
