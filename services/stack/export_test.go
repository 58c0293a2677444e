package stack

import "time"

// ClockOffset is what the stack gives its executor as the process's clock
// offset from the NATS server (executor.Config.ClockOffset).
func (st *Stack) ClockOffset() (time.Duration, bool) { return st.clockOffset() }
