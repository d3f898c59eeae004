"""Search: from a query to ranked chunks and a checked answer, and their measures.

``request`` (a search settled once from the call and the settings: ``SearchRequest``),
``searching`` (``Search``: one search run in order), ``answering`` (``Answering``: the
answer step after it), ``fitted`` (the fitted weights and query adapter searches read),
``retrieval`` (the signals, fusion by name, confidence), ``filters`` (conditions, settled
once for every store), ``answer`` (the answer prompt and the check of the model's reply),
``learning``, ``weights`` and ``adapter`` (what is learned from use), ``evaluation`` and
``answer_eval`` (retrieval and answers measured on question sets)."""
