"""DESIGN.md's public surface imports as written, and `import hybridload` pulls in no optional
engine or extra (Ray, DALI, matplotlib, scikit-image, Lightning)."""

import subprocess
import sys


def test_the_design_imports_work_and_import_hybridload_loads_no_optional_dependency():
    code = ("import sys\n"
            "from hybridload import HybridLoader, LoaderPolicy, Plan, sources, recipe, DataLoader, __version__\n"
            "import hybridload\n"
            "assert {'HybridLoader', 'LoaderPolicy', 'Plan', 'sources', 'recipe', 'DataLoader'} <= set(hybridload.__all__)\n"
            "assert Plan.__module__ == 'hybridload.planner.plan'\n"
            "heavy = ('ray', 'nvidia.dali', 'matplotlib', 'skimage', 'lightning')  # pynvml: already imported by the planner\n"
            "print(sorted(m for m in sys.modules if m in heavy))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
