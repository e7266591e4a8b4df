package policy

import "github.com/consul-xds-bridge/consul-xds-bridge/ir"

// Retry budgets (cluster) and back-off (route): how much retrying Envoy
// may do.

// retryBudget resolves a circuit_breaker's retry_budget into cb.
func (r *resolver) retryBudget(b *circuitBreakerBlock, cb *ir.CircuitBreaker) {
	rb := b.RetryBudget
	if rb == nil {
		return
	}
	// Envoy's defaults: 20% of active requests, at least 3 retries.
	cb.RetryBudgetPercent, cb.RetryBudgetMinConcurrency = 20, 3
	if rb.Percent != nil {
		if *rb.Percent <= 0 || *rb.Percent > 100 {
			r.add(valueRange(rb.Body, "percent", rb.DefRange), "Invalid percent", "retry_budget percent = %v must be above 0 and at most 100.", *rb.Percent)
		}
		cb.RetryBudgetPercent = *rb.Percent
	}
	if rb.MinConcurrency != nil {
		cb.RetryBudgetMinConcurrency = r.nonNegative(rb.Body, "min_concurrency", rb.MinConcurrency, rb.DefRange)
	}
	if b.MaxRetries != nil {
		r.add(valueRange(b.Body, "max_retries", b.DefRange), "max_retries with retry_budget", "Envoy ignores max_retries when a retry_budget is set; keep one of them.")
	}
}

// retryBackOff resolves a retry block's back-off into rt.
func (r *resolver) retryBackOff(b *retryBlock, rt *ir.Retry) {
	r.extend(durationAttr(b.BaseInterval, &rt.BaseInterval))
	r.extend(durationAttr(b.MaxInterval, &rt.MaxInterval))
	switch {
	case rt.MaxInterval > 0 && rt.BaseInterval == 0:
		r.add(b.MaxInterval.Range(), "max_interval without base_interval", "set base_interval too: Envoy's back-off needs its base to bound it.")
	case rt.MaxInterval > 0 && rt.MaxInterval < rt.BaseInterval:
		r.add(b.MaxInterval.Range(), "Invalid max_interval", "max_interval %s is below base_interval %s.", rt.MaxInterval, rt.BaseInterval)
	}
}
