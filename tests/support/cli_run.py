"""The command line run in the test's own process."""

from hybridload.cli._commands import main


def run_main(argv, capsys):
    """(exit status, stdout, stderr) of ``hybridload argv`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err
