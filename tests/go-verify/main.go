// Command go-verify checks RA Ledger's transparency-log part of a proof with the Go
// ecosystem's own C2SP code, not ours: golang.org/x/mod/sumdb/note opens the checkpoint and
// verifies the log's Ed25519 signature, filippo.io/torchwood parses the checkpoint and
// verifies the witnesses' cosignature/v1 lines, and golang.org/x/mod/sumdb/tlog checks each
// head event's inclusion and the consistency from every saved checkpoint. Issue 56, item 6:
// a third implementation beside `ledger proof verify` and tests/verify_digest.py.
//
//	go-verify -log-vkey VKEY [-witness VKEY]... [-saved CHECKPOINT]... PROOF.json
//
// VKEY: signed-note verifier keys (the log's from `ledger proof log-key`, the witnesses'
// from the policy). Every -witness must have cosigned the checkpoint. Exits 0 when all
// holds; otherwise 1, printing "FAIL: " and the first thing that does not.
package main

import (
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type proof struct {
	Streams []struct {
		Stream string `json:"stream"`
		Events []struct {
			Hash string `json:"hash"`
		} `json:"events"`
	} `json:"streams"`
	Log *struct {
		Checkpoint string `json:"checkpoint"`
		Heads      []struct {
			Index int64    `json:"index"`
			Path  []string `json:"path"`
		} `json:"heads"`
		Consistency []struct {
			OldSize int64    `json:"old_size"`
			Proof   []string `json:"proof"`
		} `json:"consistency"`
	} `json:"log"`
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	logVkey := flag.String("log-vkey", "", "the log's verifier key (ledger proof log-key)")
	var witnesses, saved list
	flag.Var(&witnesses, "witness", "a witness's cosignature/v1 verifier key; repeat")
	flag.Var(&saved, "saved", "a checkpoint saved earlier (a file); repeat")
	flag.Parse()
	if *logVkey == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: go-verify -log-vkey VKEY [-witness VKEY]... [-saved FILE]... PROOF.json")
		os.Exit(2)
	}
	said, err := verify(*logVkey, witnesses, saved, flag.Arg(0))
	if err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
	for _, line := range said {
		fmt.Println("ok:", line)
	}
}

func verify(logVkey string, witnessVkeys, saved []string, path string) ([]string, error) {
	var said []string
	logKey, err := note.NewVerifier(logVkey)
	if err != nil {
		return nil, fmt.Errorf("-log-vkey %q: %v", logVkey, err)
	}
	verifiers := []note.Verifier{logKey}
	for _, vkey := range witnessVkeys {
		w, err := cosignatureVerifier(vkey)
		if err != nil {
			return nil, fmt.Errorf("-witness %q: %v", vkey, err)
		}
		verifiers = append(verifiers, w)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p proof
	if err := json.Unmarshal(text, &p); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if p.Log == nil {
		return nil, errors.New("the proof has no transparency log part")
	}
	n, err := note.Open([]byte(p.Log.Checkpoint), note.VerifierList(verifiers...))
	if err != nil {
		return nil, fmt.Errorf("log.checkpoint: %v", err)
	}
	for _, v := range verifiers {
		if !signedBy(n, v) {
			return nil, fmt.Errorf("log.checkpoint: no valid signature by %s+%08x", v.Name(), v.KeyHash())
		}
	}
	for _, sig := range n.Sigs[1:] {
		when, _ := torchwood.CosignatureTimestamp(sig)
		said = append(said, fmt.Sprintf("cosigned by %s at %d", sig.Name, when))
	}
	checkpoint, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		return nil, fmt.Errorf("log.checkpoint: %v", err)
	}
	if checkpoint.Origin != logKey.Name() {
		return nil, fmt.Errorf("the checkpoint's origin %q is not the log key's %q", checkpoint.Origin, logKey.Name())
	}
	tree := checkpoint.Tree
	said = append(said, fmt.Sprintf("checkpoint %s of size %d signed by the log", checkpoint.Origin, tree.N))
	if len(p.Log.Heads) != len(p.Streams) {
		return nil, fmt.Errorf("log.heads: %d heads for %d streams", len(p.Log.Heads), len(p.Streams))
	}
	for i, head := range p.Log.Heads {
		events := p.Streams[i].Events
		if len(events) == 0 {
			return nil, fmt.Errorf("stream %s has no events", p.Streams[i].Stream)
		}
		event, err := hex.DecodeString(events[len(events)-1].Hash)
		if err != nil {
			return nil, fmt.Errorf("stream %s: the head's hash: %v", p.Streams[i].Stream, err)
		}
		path, err := hashes(head.Path)
		if err != nil {
			return nil, fmt.Errorf("log.heads[%d].path: %v", i, err)
		}
		if err := tlog.CheckRecord(tlog.RecordProof(path), tree.N, tree.Hash, head.Index, tlog.RecordHash(event)); err != nil {
			return nil, fmt.Errorf("the head of stream %s is not in the log at index %d: %v", p.Streams[i].Stream, head.Index, err)
		}
		said = append(said, fmt.Sprintf("the head of %s is leaf %d", p.Streams[i].Stream, head.Index))
	}
	for _, file := range saved {
		line, err := consistent(file, logKey, p.Log.Consistency, tree)
		if err != nil {
			return nil, err
		}
		said = append(said, line)
	}
	return said, nil
}

// consistent checks the log's tree extends the saved checkpoint in file.
func consistent(file string, logKey note.Verifier, proofs []struct {
	OldSize int64    `json:"old_size"`
	Proof   []string `json:"proof"`
}, tree tlog.Tree) (string, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	n, err := note.Open(text, note.VerifierList(logKey))
	if err != nil {
		return "", fmt.Errorf("saved checkpoint %s: %v", file, err)
	}
	old, err := torchwood.ParseCheckpoint(n.Text)
	if err != nil {
		return "", fmt.Errorf("saved checkpoint %s: %v", file, err)
	}
	var hs []tlog.Hash
	if old.N != tree.N {
		found := false
		for _, c := range proofs {
			if c.OldSize == old.N {
				hs, err = hashes(c.Proof)
				if err != nil {
					return "", fmt.Errorf("log.consistency from %d: %v", old.N, err)
				}
				found = true
			}
		}
		if !found {
			return "", fmt.Errorf("no consistency proof from the saved size %d", old.N)
		}
	}
	if err := tlog.CheckTree(tlog.TreeProof(hs), tree.N, tree.Hash, old.N, old.Hash); err != nil {
		return "", fmt.Errorf("NOT CONSISTENT with the saved checkpoint of size %d: %v", old.N, err)
	}
	return fmt.Sprintf("the log extends the saved checkpoint of size %d", old.N), nil
}

func signedBy(n *note.Note, v note.Verifier) bool {
	for _, sig := range n.Sigs {
		if sig.Name == v.Name() && sig.Hash == v.KeyHash() {
			return true
		}
	}
	return false
}

func hashes(texts []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(texts))
	for i, text := range texts {
		raw, err := hex.DecodeString(text)
		if err != nil || len(raw) != tlog.HashSize {
			return nil, fmt.Errorf("%q is not a 32-byte hash", text)
		}
		copy(out[i][:], raw)
	}
	return out, nil
}

// publicOnly is a crypto.Signer that holds a witness's public key alone: torchwood v0.6.1
// builds its cosignature/v1 verifier (the one litewitness signs with) only from a signer,
// and reads nothing but the public key until asked to sign, which this refuses.
type publicOnly ed25519.PublicKey

func (k publicOnly) Public() crypto.PublicKey { return ed25519.PublicKey(k) }
func (k publicOnly) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return nil, errors.New("a verifier does not sign")
}

// cosignatureVerifier is torchwood's verifier for a cosignature/v1 vkey (algorithm 0x04),
// checked to encode back to the same vkey.
func cosignatureVerifier(vkey string) (note.Verifier, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, errors.New("not name+hash+key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 4 {
		return nil, errors.New("not a cosignature/v1 Ed25519 key (algorithm 0x04)")
	}
	if _, err := strconv.ParseUint(parts[1], 16, 32); err != nil {
		return nil, errors.New("the key hash is not 8 hex digits")
	}
	signer, err := torchwood.NewCosignatureSigner(parts[0], publicOnly(raw[1:]))
	if err != nil {
		return nil, err
	}
	v := signer.Verifier()
	if v.String() != vkey {
		return nil, fmt.Errorf("its key hash is not %08x", v.KeyHash())
	}
	return v, nil
}
