"""lhotse manifests in and out: ``deepspeech data import lhotse`` and ``data export lhotse``.

lhotse (the k2/icefall data library) keeps corpora as JSON Lines of recordings,
supervisions and cuts; this package reads and writes those files directly, so lhotse
itself is not needed (the ``lhotse`` extra installs it for the round-trip tests and for
users who want it). How one maps onto the other:

    lhotse                                       manifest line
    recording source (type "file")               audio_filepath
    cut.start + supervision.start                offset (absent when the whole file)
    supervision.duration                         duration
    supervision.text                             text
    supervision.speaker                          speaker
    supervision.language, .gender                "language", "gender" (extra keys)
    supervision.custom, cut.custom               their keys, as extra keys

``importer.import_lhotse`` reads cuts, recordings with supervisions, or a Shar folder
(``shar``), one cut at a time through ``cuts.cut_utterance``, which names what cannot be
mapped; ``exporter.export_lhotse`` writes the three files from a manifest; ``lines`` reads
and writes lhotse's (gzipped) JSON Lines. This file imports none of them, so that the
command line loads the audio libraries only when one of the commands runs.
"""
