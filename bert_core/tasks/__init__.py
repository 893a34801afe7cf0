"""Task data as people have it: readers for GLUE/XNLI TSVs, SQuAD JSON and CoNLL NER files, and the task
catalog (catalog.py: name -> kind, files, main metric). Below both fine-tuning and the scorers, which read
the same files with them; importable without torch."""
