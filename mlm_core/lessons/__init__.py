"""One view-model per page, beside the flow: each turns flow results into the rows, numbers and
sentences a lesson shows. Import each from its own module (``from mlm_core.lessons.loss_lab import
loss_batch``): nothing is re-exported here, so importing one lesson loads only what it uses.

- ``masking_view``: the Masking page (per-token traces, rates over many sentences, code snippets).
- ``loss_lab``: the Loss page, and ``LossBatch``, the one batch of the Loss page and the Bug museum.
- ``nsp``: the Loss page's next-sentence-prediction lesson (pairs, MLM + NSP, a new NSP head).
- ``museum``: the Bug museum's exhibits; ``audit``: its check of a batch from your own pipeline.
- ``training_registry``: the Training page's lessons, one record each (defaults and why, variants, choices,
  verdicts, the class's question); ``training_view``: the texts they read, the common defaults, the probe rows;
  ``training_lessons``: the masking-rate race, the bugs that train, the filmstrip.
- ``efficiency``: the Efficiency page's measurements; ``vocab``: the Tokenizer page's masking demo;
  ``inside``: what the Inside page's views say across heads, sentences and training.
- ``quiz``: the Quiz page (questions, scores).
- ``export``: every page's lesson export (JSON, zip of tables and charts).
"""
