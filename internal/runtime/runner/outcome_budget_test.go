package runner

// finishErr is journal.finish's error alone.
func finishErr(_ *bodyRef, err error) error { return err }
