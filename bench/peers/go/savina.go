// Savina's chameneos and big in Go (Debian 12's golang-go, 1.19); thread count = GOMAXPROCS.
// The definitions, followed message for message, and the parameters: bench/workloads/savina.hpp.
// An actor is a goroutine reading its mailbox, a buffered channel large enough that no send
// ever blocks (as an actor's send never does): a creature has one answer outstanding at most
// (capacity 1), the mall 100 requests and 100 reports, a big worker a ping from each of the
// 1,000 workers and one pong.
//
//	savina chameneos <meetings>    a mall and 100 creatures
//	savina big <pings>             1,000 workers and a sink
//
// Output (../../../../shared/BENCH.md's protocol):
//
//	go-goroutine <workload> <param> <GOMAXPROCS> <seconds> result=<r>[(WRONG)]
//
// Build: go build -o savina savina.go (bench/peers/run_savina.py does).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

const chameneosCreatures = 100
const bigWorkers = 1000

// --- chameneos -------------------------------------------------------------------------------

// Colours: 0 red, 1 yellow, 2 blue, 3 faded.
func complement(mine, other int8) int8 {
	if mine == other {
		return mine
	}
	return 3 - mine - other
}

const (
	meet = iota
	change
	closed
)

type creatureMessage struct {
	what        int8
	otherColour int8                 // meet: the other's colour; change: the new colour
	other       chan creatureMessage // meet: whom to tell the new colour
}

type mallMessage struct {
	report   bool
	colour   int8
	creature chan creatureMessage // a request's sender
	meetings int64                // a report's count
}

func mall(meetingsLeft int64, box chan mallMessage, done chan<- int64) {
	var waiting chan creatureMessage
	var held, reported int64
	open := chameneosCreatures
	for m := range box {
		if m.report {
			reported += m.meetings
			open--
			if open == 0 {
				if reported == 2*held {
					done <- held
				} else {
					done <- -reported
				}
				return
			}
			continue
		}
		if meetingsLeft == 0 {
			m.creature <- creatureMessage{what: closed}
		} else if waiting == nil {
			waiting = m.creature
		} else {
			meetingsLeft--
			held++
			waiting <- creatureMessage{what: meet, otherColour: m.colour, other: m.creature}
			waiting = nil
		}
	}
}

func creature(colour int8, mallBox chan<- mallMessage) {
	box := make(chan creatureMessage, 1)
	var meetings int64
	mallBox <- mallMessage{colour: colour, creature: box}
	for m := range box {
		switch m.what {
		case meet:
			colour = complement(colour, m.otherColour)
			meetings++
			m.other <- creatureMessage{what: change, otherColour: colour}
			mallBox <- mallMessage{colour: colour, creature: box}
		case change:
			colour = m.otherColour
			meetings++
			mallBox <- mallMessage{colour: colour, creature: box}
		case closed:
			mallBox <- mallMessage{report: true, meetings: meetings}
			return
		}
	}
}

func chameneos(meetings int64) int64 {
	box := make(chan mallMessage, 2*chameneosCreatures)
	done := make(chan int64, 1)
	go mall(meetings, box, done)
	for i := 0; i < chameneosCreatures; i++ {
		go creature(int8(i%3), box)
	}
	return <-done
}

// --- big -------------------------------------------------------------------------------------

type bigMessage struct {
	ping   bool
	sender int32 // the worker's index; -1 for the kick-off pong
}

const kickOff = -1

func bigWorker(index int32, pingsToSend int64, boxes []chan bigMessage, sink chan<- int64) {
	random := uint32(index) // Savina's PseudoRandom, seeded with the index
	pinged := int32(kickOff)
	var pingsSent, pongs int64
	wrongPong := false
	for m := range boxes[index] {
		if m.ping {
			boxes[m.sender] <- bigMessage{ping: false, sender: index}
			continue
		}
		if m.sender != pinged {
			wrongPong = true
		}
		if m.sender != kickOff {
			pongs++
		}
		if pingsSent == pingsToSend {
			if wrongPong {
				sink <- -1
			} else {
				sink <- pongs
			}
			continue
		}
		random = (random*1309 + 13849) & 65535
		pinged = int32(random % bigWorkers)
		pingsSent++
		boxes[pinged] <- bigMessage{ping: true, sender: index}
	}
}

func big(pings int64) int64 {
	boxes := make([]chan bigMessage, bigWorkers)
	for i := range boxes {
		boxes[i] = make(chan bigMessage, bigWorkers+1)
	}
	sink := make(chan int64, bigWorkers)
	for i := int32(0); i < bigWorkers; i++ {
		share := pings / bigWorkers
		if int64(i) < pings%bigWorkers {
			share++
		}
		go bigWorker(i, share, boxes, sink)
	}
	for _, box := range boxes {
		box <- bigMessage{ping: false, sender: kickOff}
	}
	var pongs int64
	for i := 0; i < bigWorkers; i++ {
		pongs += <-sink
	}
	for _, box := range boxes {
		close(box)
	}
	return pongs
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: savina chameneos|big <param>")
		os.Exit(2)
	}
	w := os.Args[1]
	p, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil || p <= 0 {
		fmt.Fprintln(os.Stderr, "usage: savina chameneos|big <param>")
		os.Exit(2)
	}
	var f func(int64) int64
	switch w {
	case "chameneos":
		f = chameneos
	case "big":
		f = big
	default:
		fmt.Fprintln(os.Stderr, "unknown workload", w)
		os.Exit(2)
	}
	f(p / 10) // warm-up
	t0 := time.Now()
	r := f(p)
	s := time.Since(t0).Seconds()
	mark := ""
	if r != p {
		mark = "(WRONG)"
	}
	fmt.Printf("go-goroutine %s %d %d %.6f result=%d%s\n", w, p, runtime.GOMAXPROCS(0), s, r, mark)
	if r != p {
		os.Exit(1)
	}
}
