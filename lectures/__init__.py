"""Lecture scripts. Each ``NN_topic.py`` runs on its own; notebooks import it as
``importlib.import_module("lectures.NN_topic")`` to reuse its experiment functions."""
