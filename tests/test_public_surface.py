"""DESIGN.md's public surface imports as written, and `import hybridload` pulls in no optional
engine or extra (Ray, DALI, matplotlib, scikit-image, Lightning)."""

import os
from pathlib import Path

import pytest


def test_the_design_imports_work_and_import_hybridload_loads_no_optional_dependency(zygote):
    # the zygote's child has imported torch, numpy and Pillow only (none of the heavy ones below)
    code = (
        "import sys\n"
        "from hybridload import HybridLoader, LoaderPolicy, Plan, sources, recipe, DataLoader, __version__\n"
        "import hybridload\n"
        "assert {'HybridLoader', 'LoaderPolicy', 'Plan', 'sources', 'recipe', 'DataLoader'} <= set(hybridload.__all__)\n"
        "assert Plan.__module__ == 'hybridload.planner._plan'\n"
        "heavy = ('ray', 'nvidia.dali', 'matplotlib', 'skimage', 'lightning')  # pynvml: already imported by the planner\n"
        "print(sorted(m for m in sys.modules if m in heavy))\n"
    )
    proc = zygote.run(code=code, cwd=Path.cwd(), env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_a_missing_extra_names_the_packages_it_brings_not_a_pypi_line_for_hybridload():
    """hybridload is not on PyPI: `pip install 'hybridload[ray]'` fails for a user, so a message
    names the extra's own requirements, read from the installed metadata (pyproject.toml)."""
    from hybridload._extras import MissingExtraError, install_hint, require

    assert install_hint("ray") == "pip install 'ray>=2.40' (hybridload's [ray] extra)"
    assert install_hint("dali") == "pip install 'nvidia-dali-cuda120<3,>=1.44' (hybridload's [dali] extra)"
    assert "hybridload[" not in install_hint("torch-gpu") and "torchvision" in install_hint("torch-gpu")
    with pytest.raises(MissingExtraError) as info:
        require("no_such_module_here", "plot", "the plots")
    assert "pip install 'matplotlib>=3.7'" in str(info.value) and "hybridload[" not in str(info.value)
