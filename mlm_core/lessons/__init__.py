"""One view-model per page, beside the flow: each turns flow results into the rows, numbers and
sentences a lesson shows. Import each from its own module (``from mlm_core.lessons.loss_lab import
loss_batch``): nothing is re-exported here, so importing one lesson loads no other.
"""
