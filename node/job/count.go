package job

// CountByState counts the controller's jobs in each state. Unlike Jobs it
// builds no views (no lease is opened, no ledger or log file read), so a
// metrics scrape may call it as often as it likes.
func (c *Controller) CountByState() map[string]int64 {
	c.mu.Lock()
	all := make([]*jobState, 0, len(c.jobs))
	for _, js := range c.jobs {
		all = append(all, js)
	}
	c.mu.Unlock()
	out := map[string]int64{}
	for _, js := range all {
		js.mu.Lock()
		out[js.rec.State.String()]++
		js.mu.Unlock()
	}
	return out
}

// CountByState counts the attempts the executor holds in each state.
func (e *Executor) CountByState() map[string]int64 {
	e.mu.Lock()
	runs := make([]*run, 0, len(e.runs))
	for _, r := range e.runs {
		runs = append(runs, r)
	}
	e.mu.Unlock()
	out := map[string]int64{}
	for _, r := range runs {
		out[r.State().String()]++
	}
	return out
}
