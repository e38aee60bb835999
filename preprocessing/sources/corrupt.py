"""`CorruptInput`: an input file that stops being readable part way through.

A reader raises it when the bytes themselves break after some records were read: a truncated or corrupt gzip /
bz2 / zstd stream, a bz2 block that fails its CRC check, XML that breaks inside a dump, WARC framing that turns
into garbage. It is an `InputError` (so a reader used on its own still fails with one clear line), but the
documents pipeline catches it and quarantines the *file* (reason, position, records read before the break) instead
of ending the job; the driver fails the job only when more files than `corpus.max_bad_inputs` went bad
(preprocessing/config.py documents the default and the rule for the records read before the break).

Problems found before any record is read (no such file, not a WARC at all, a root element that is not
<mediawiki>) stay plain `InputError`s: they are almost always a wrong `corpus.format` or path, which every file of
the job would share.

    from preprocessing.sources.corrupt import CorruptInput
    raise CorruptInput(f"{name}: truncated gzip at byte 409,600 after 17 records", reason="truncated_gzip",
                       file=name, records_read=17, offset=409_600)
"""

from __future__ import annotations

from bertfactory.errors import InputError


class CorruptInput(InputError):
    """A file that broke after `records_read` records. `message` is the whole one-line error, starting with the
    file's name; `offset` is the byte position where the break was found (compressed bytes of the file for a
    compressed input), None where the reader cannot tell."""

    def __init__(self, message: str, *, reason: str, file: str, records_read: int, offset: int | None):
        super().__init__(message)
        self.reason, self.file, self.records_read, self.offset = reason, file, records_read, offset

    def __reduce__(self):  # picklable with its fields (Beam may ship it between processes)
        return _rebuild, (str(self), self.reason, self.file, self.records_read, self.offset)

    def to_quarantine(self, source: int) -> dict:
        """Its quarantine record's fields (preprocessing.records.Quarantined): the file is the record, its ordinal
        the number of records read before the break, the detail the message without the file name."""
        message = str(self)
        detail = message[len(self.file) + 2:] if message.startswith(f"{self.file}: ") else message
        return {"source": source, "file": self.file, "ordinal": self.records_read, "record_id": "<file>",
                "reason": self.reason, "detail": detail}


def _rebuild(message: str, reason: str, file: str, records_read: int, offset: int | None) -> CorruptInput:
    return CorruptInput(message, reason=reason, file=file, records_read=records_read, offset=offset)


__all__ = ["CorruptInput"]
