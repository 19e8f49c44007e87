package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

func writeReport(ctx context.Context, fencingToken int64) error {
	fmt.Println("writing with fencing token", fencingToken)
	return ctx.Err()
}

// Take a lock, do the work under it with the lease's context and fencing token, release.
func ExampleClient_Lock() {
	ctx := context.Background()
	c := leasehold.New("http://127.0.0.1:8080")
	lease, err := c.Lock(ctx, "nightly-report", leasehold.LockOptions{TTL: 30 * time.Second, Wait: 30 * time.Second})
	if err != nil {
		var p *leasehold.Problem
		if errors.As(err, &p) && p.Code == leasehold.CodeLockHeld {
			log.Printf("held by %s; try again in %v", p.Holder, p.RetryAfter)
		}
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	if err := writeReport(lease.Context(), lease.FencingToken()); err != nil {
		log.Print(err)
	}
	if err := lease.Err(); err != nil {
		log.Print(err) // lost while writing: the work was told to stop
	}
}

// The same job, with the release and the loss check done by WithLock.
func ExampleClient_WithLock() {
	ctx := context.Background()
	c := leasehold.New("http://127.0.0.1:8080")
	err := c.WithLock(ctx, "nightly-report", leasehold.LockOptions{TTL: 30 * time.Second, Wait: 30 * time.Second},
		func(ctx context.Context, lease *leasehold.Lease) error {
			return writeReport(ctx, lease.FencingToken())
		})
	if errors.Is(err, leasehold.ErrLeaseLost) {
		log.Print("the lock was lost while the report was written: ", err)
	}
}

// Three of the ten permits of a semaphore.
func ExampleClient_Semaphore() {
	ctx := context.Background()
	c := leasehold.New("http://127.0.0.1:8080")
	lease, err := c.Semaphore(ctx, "gpu-pool", leasehold.SemaphoreOptions{Limit: 10, Permits: 3, TTL: time.Minute, Wait: 30 * time.Second})
	if err != nil {
		log.Fatal(err) // Code "no_permits" when too few came back within the wait
	}
	defer lease.Release(ctx)
	// ... train with lease.Context() ...
}
