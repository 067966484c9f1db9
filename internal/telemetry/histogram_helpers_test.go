package telemetry

// NewHistogram returns a histogram with the given upper bounds, in
// seconds, ascending (the tests' own layouts).
func NewHistogram(bounds []float64) *Histogram { return newHistogram(newLayout(bounds)) }
