package leasehold

import (
	"net/url"
	"strings"
)

// shape is the kind of lease a place holds, and so which routes and calls it has: a lock,
// a semaphore's permits, a multilease, or an election's term (a Term wraps its Lease).
type shape int

const (
	shapeLock       shape = iota // /v1/locks/{name}/leases: reentry levels, fair tickets
	shapeSemaphore               // /v1/semaphores/{name}/leases: permits
	shapeMultilease              // /v1/multileases: several locks as one lease
	shapeElection                // /v1/elections/{name}/candidates: a leader's term
)

// place says where a lease lives on the server, decided once when it is acquired.
type place struct {
	shape shape
	// name is the lock's, semaphore's or election's; a multilease's locks, joined by commas.
	name string
	// collection is where it is acquired (POST) and its lease ids go under.
	collection string
}

func lockPlace(name string) place {
	return place{shape: shapeLock, name: name, collection: lockPath(name) + "/leases"}
}

func semaphorePlace(name string) place {
	return place{shape: shapeSemaphore, name: name, collection: semaphorePath(name) + "/leases"}
}

func multileasePlace(locks []MultiLock) place {
	names := make([]string, len(locks))
	for i, l := range locks {
		names[i] = l.Name
	}
	return place{shape: shapeMultilease, name: strings.Join(names, ","), collection: "/v1/multileases"}
}

func electionPlace(name string) place {
	return place{shape: shapeElection, name: name, collection: electionPath(name) + "/candidates"}
}

// leasePath is the lease's own URL path (heartbeat, release, watch and inspect hang off it).
func (p place) leasePath(id string) string { return p.collection + "/" + url.PathEscape(id) }

// levels: the lease may be re-entered and released one level at a time (locks only).
func (p place) levels() bool { return p.shape == shapeLock }

// releaseQuery releases every level of a lock or every permit of a semaphore; a multilease's
// release takes no parameter (its route refuses unknown ones), nor does a resignation.
func (p place) releaseQuery() url.Values {
	if p.shape == shapeMultilease || p.shape == shapeElection {
		return nil
	}
	return url.Values{"all": {"true"}}
}

// releaseKey is the Idempotency-Key of a full release: a fresh one for locks and semaphores,
// whose retry then gets the first answer; none for a multilease, whose route keeps no keys
// (a retry of a release that went through answers 410 released, which Release counts as done),
// and none for a resignation, whose route keeps none either (the same 410 released).
func (p place) releaseKey() string {
	if p.shape == shapeMultilease || p.shape == shapeElection {
		return ""
	}
	return newKey()
}
