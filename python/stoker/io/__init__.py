"""Where bytes come from and how media decode: ``storage`` (local folders, S3 and HTTPS as one
``Root``), ``video`` (:class:`stoker.VideoReader`), ``image`` (image decoding) and ``files``
(atomic writes, locks and path checks for what stoker writes).
"""
