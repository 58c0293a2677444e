package query

// TaskIndex reports r's task index: its IDs, sorted (nil while it is not
// live), and how many times its watch was started after the first.
func TaskIndex(r *Reader) (ids []string, restarts int) {
	x := r.taskIndex
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.live {
		ids = x.keys.after(nil, "", x.keys.n)
	}
	return ids, x.restarts
}
