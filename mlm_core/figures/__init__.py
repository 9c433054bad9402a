"""Figure builders: pure functions, data in, plotly figure out (one module per lesson)."""
