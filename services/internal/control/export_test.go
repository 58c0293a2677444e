package control

import "time"

// SetClock makes c read the time from now (Stored's look back).
func SetClock(c *Client, now func() time.Time) { c.now = now }
