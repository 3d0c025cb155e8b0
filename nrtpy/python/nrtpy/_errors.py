"""nrtpy's exceptions (both are RuntimeError, so ``except RuntimeError`` catches every one)."""


class NrtpyError(RuntimeError):
    """An error of nrtpy's own objects: a freed tensor, an object from a runtime that
    ``nrtpy.reset()`` closed, ``nrtpy.configure()`` while the runtime is active."""


class NrtError(RuntimeError):
    """The runtime returned a status other than NRT_SUCCESS.

    ``status`` is the numeric ``NRT_STATUS`` (e.g. 1006), ``status_name`` its name
    (``"NRT_EXEC_OOB"``), ``detail`` what failed; ``str(e)`` reads
    ``NRT Error NRT_EXEC_OOB(1006): Failed to execute model ...``.
    """

    def __init__(self, status, status_name, detail):
        self.status = int(status)
        self.status_name = str(status_name)
        self.detail = str(detail)
        super().__init__(f"NRT Error {self.status_name}({self.status}): {self.detail}")

    def __reduce__(self):
        return (type(self), (self.status, self.status_name, self.detail))
