"""One map from a failure's StatusCode to the Python exception (python/bindings/errors.cc)."""

import pytest

import stoker
from stoker import _core

# stoker/status.h's codes, in order.
(INVALID_ARGUMENT, NOT_FOUND, CORRUPT_DATA, UNSUPPORTED, IO_ERROR, INTERNAL, RESOURCE, DENIED) = (
    range(1, 9)
)


@pytest.mark.parametrize("video", [True, False])
def test_each_code_raises_its_exception_whatever_the_area(video):
    data_error = stoker.DecodeError if video else stoker.DatasetError
    expected = {
        INVALID_ARGUMENT: stoker.InvalidArgumentError,
        NOT_FOUND: data_error,
        CORRUPT_DATA: data_error,
        UNSUPPORTED: data_error,
        IO_ERROR: data_error,
        INTERNAL: stoker.InternalError,
        RESOURCE: stoker.ResourceError,
        DENIED: stoker.AccessDeniedError,
    }
    for code, error in expected.items():
        with pytest.raises(error, match=f"failure {code}") as raised:
            _core._raise_status(code, video, f"failure {code}")
        assert type(raised.value) is error
        assert isinstance(raised.value, stoker.Error)
    # An internal fault is never a data error, and an argument error is also a ValueError.
    assert not issubclass(stoker.InternalError, (stoker.DatasetError, stoker.DecodeError))
    assert issubclass(stoker.InvalidArgumentError, ValueError)
    assert issubclass(stoker.ResourceError, MemoryError)
    assert issubclass(stoker.AccessDeniedError, PermissionError)


def test_ok_is_not_an_error():
    with pytest.raises(ValueError, match="not a failing"):
        _core._raise_status(0, True, "fine")
    with pytest.raises(ValueError, match="not a failing"):
        _core._raise_status(DENIED + 1, True, "past the last code")
