package topology

import "testing"

// A topology whose only remnant is its guard is not gone: the guard would
// keep putting its rules back, so Read must keep it in state for destroy.
func TestStatusGoneCountsTheGuard(t *testing.T) {
	if !(HostStatus{}).Gone() {
		t.Fatal("an empty status is not gone")
	}
	if (HostStatus{GuardPresent: true}).Gone() {
		t.Fatal("a status with only the guard left counts as gone")
	}
}
