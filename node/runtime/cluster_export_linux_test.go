package runtime

import "net"

// ClusterListener is the node's listener of p's cluster network (nil
// without one), for tests that check it is closed with the job.
func ClusterListener(p Process) net.Listener {
	if cl := p.(*process).cluster; cl != nil {
		return cl.ln
	}
	return nil
}
