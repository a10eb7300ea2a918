"""What a visitor may ask a Race or Drift run for: the controls (core's declarations as the app offers
them), a run's raw inputs checked into what it decodes, and the input panel that sends them."""
