"""Running the `keras-vit` command line in-process from a test."""

from keras_vit.cli import main


def fails(argv, capsys, *expected):
    """Runs the CLI; asserts exit 2 with one error line holding each of `expected`; returns it."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for text in expected:
        assert text in err, err
    return err
