"""Search: from a query to ranked chunks and a checked answer, and their measures.

``retrieval`` (the signals, fusion by name, confidence), ``filters`` (conditions, settled
once for every store), ``answer`` (the answer prompt and the check of the model's reply),
``evaluation`` and ``answer_eval`` (retrieval and answers measured on question sets)."""
