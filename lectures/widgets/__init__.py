"""Plots and ipywidgets for the notebooks: a thin layer over the lectures' experiment functions.

One module per lecture (``lectureNN.py``). Each builds figures from the data a lecture's demo
function returns and widgets whose callbacks call pure functions, so pytest can drive them.
"""
