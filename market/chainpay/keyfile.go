package chainpay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/decred/dcrd/dcrec/secp256k1/v4"
	"github.com/google/uuid"
	"golang.org/x/crypto/scrypt"
)

// A payment key is kept in a key file of go-ethereum's keystore format
// version 3 (scrypt and AES-128-CTR, the format wallets import and
// export), encrypted with a passphrase. Neither the key nor the
// passphrase is ever logged or put in an error.

// Scrypt costs: StandardScryptN is go-ethereum's default (about 1 s and
// 256 MiB); LightScryptN is for tests. A key file asking for more than
// MaxScryptN is refused, not worked on.
const (
	StandardScryptN = 1 << 18
	StandardScryptP = 1
	LightScryptN    = 1 << 12
	LightScryptP    = 6
	MaxScryptN      = 1 << 20
	scryptR         = 8
	scryptDKLen     = 32
)

type keyFileJSON struct {
	Address string     `json:"address"`
	Crypto  cryptoJSON `json:"crypto"`
	ID      string     `json:"id"`
	Version int        `json:"version"`
}

type cryptoJSON struct {
	Cipher       string `json:"cipher"`
	CipherText   string `json:"ciphertext"`
	CipherParams struct {
		IV string `json:"iv"`
	} `json:"cipherparams"`
	KDF       string `json:"kdf"`
	KDFParams struct {
		DKLen int    `json:"dklen"`
		N     int    `json:"n"`
		P     int    `json:"p"`
		R     int    `json:"r"`
		Salt  string `json:"salt"`
	} `json:"kdfparams"`
	MAC string `json:"mac"`
}

// NewKeyFile makes a secp256k1 payment key and writes it to path (0600,
// not overwriting a file there), encrypted with pass at the scrypt cost
// n, p (StandardScryptN, StandardScryptP outside tests). It returns the
// key.
func NewKeyFile(path string, pass []byte, n, p int) (*secp256k1.PrivateKey, error) {
	key, err := secp256k1.GeneratePrivateKey()
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	blob, err := EncryptKey(key, pass, n, p)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	_, err = f.Write(blob)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("payment key: write %s: %w", path, err)
	}
	return key, nil
}

// EncryptKey encodes key as a version 3 key file encrypted with pass.
func EncryptKey(key *secp256k1.PrivateKey, pass []byte, n, p int) ([]byte, error) {
	salt := make([]byte, 32)
	iv := make([]byte, aes.BlockSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	if _, err := rand.Read(iv); err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	dk, err := scrypt.Key(pass, salt, n, scryptR, p, scryptDKLen)
	if err != nil {
		return nil, fmt.Errorf("payment key: scrypt: %w", err)
	}
	raw := key.Serialize()
	ct, err := aesCTR(dk[:16], iv, raw)
	clear(raw)
	if err != nil {
		return nil, err
	}
	mac := Keccak256(dk[16:32], ct)
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	addr := AddressOf(key.PubKey())
	kf := keyFileJSON{Address: hex.EncodeToString(addr[:]), ID: id.String(), Version: 3}
	c := &kf.Crypto
	c.Cipher, c.CipherText, c.CipherParams.IV = "aes-128-ctr", hex.EncodeToString(ct), hex.EncodeToString(iv)
	c.KDF, c.KDFParams.DKLen, c.KDFParams.N, c.KDFParams.P, c.KDFParams.R = "scrypt", scryptDKLen, n, p, scryptR
	c.KDFParams.Salt, c.MAC = hex.EncodeToString(salt), hex.EncodeToString(mac[:])
	return json.MarshalIndent(kf, "", "  ")
}

// LoadKeyFile decrypts the payment key in the key file at path.
func LoadKeyFile(path string, pass []byte) (*secp256k1.PrivateKey, error) {
	blob, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("payment key: %w", err)
	}
	key, err := DecryptKey(blob, pass)
	if err != nil {
		return nil, fmt.Errorf("payment key %s: %w", path, err)
	}
	return key, nil
}

// DecryptKey decodes a version 3 key file (scrypt, AES-128-CTR) and
// decrypts it with pass; a wrong passphrase fails the MAC check.
func DecryptKey(blob []byte, pass []byte) (*secp256k1.PrivateKey, error) {
	var kf keyFileJSON
	if err := json.Unmarshal(blob, &kf); err != nil {
		return nil, fmt.Errorf("%w: key file: %v", ErrMalformed, err)
	}
	c := kf.Crypto
	kp := c.KDFParams
	switch {
	case kf.Version != 3:
		return nil, fmt.Errorf("%w: key file version %d (want 3)", ErrUnsupported, kf.Version)
	case c.Cipher != "aes-128-ctr" || c.KDF != "scrypt":
		return nil, fmt.Errorf("%w: key file cipher %q, kdf %q (want aes-128-ctr, scrypt)", ErrUnsupported, c.Cipher, c.KDF)
	case kp.DKLen != scryptDKLen || kp.R != scryptR || kp.N < 2 || kp.N > MaxScryptN || kp.N&(kp.N-1) != 0 || kp.P < 1 || kp.P > 16:
		return nil, fmt.Errorf("%w: key file scrypt n=%d r=%d p=%d dklen=%d", ErrMalformed, kp.N, kp.R, kp.P, kp.DKLen)
	}
	salt, err1 := hex.DecodeString(kp.Salt)
	iv, err2 := hex.DecodeString(c.CipherParams.IV)
	ct, err3 := hex.DecodeString(c.CipherText)
	mac, err4 := hex.DecodeString(c.MAC)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(iv) != aes.BlockSize || len(ct) != 32 || len(mac) != 32 {
		return nil, fmt.Errorf("%w: key file: bad hex field or length", ErrMalformed)
	}
	dk, err := scrypt.Key(pass, salt, kp.N, scryptR, kp.P, scryptDKLen)
	if err != nil {
		return nil, fmt.Errorf("key file: scrypt: %w", err)
	}
	if want := Keccak256(dk[16:32], ct); subtle.ConstantTimeCompare(want[:], mac) != 1 {
		return nil, fmt.Errorf("%w: key file MAC mismatch (is the passphrase right?)", ErrSignature)
	}
	raw, err := aesCTR(dk[:16], iv, ct)
	if err != nil {
		return nil, err
	}
	defer clear(raw)
	var s secp256k1.ModNScalar
	if overflow := s.SetByteSlice(raw); overflow || s.IsZero() {
		return nil, fmt.Errorf("%w: key file holds no valid secp256k1 key", ErrMalformed)
	}
	key := secp256k1.NewPrivateKey(&s)
	if addr := AddressOf(key.PubKey()); kf.Address != "" && !strings.EqualFold(strings.TrimPrefix(kf.Address, "0x"), hex.EncodeToString(addr[:])) {
		return nil, fmt.Errorf("%w: key file names address %s, its key's is %s", ErrMalformed, kf.Address, addr)
	}
	return key, nil
}

func aesCTR(key, iv, in []byte) ([]byte, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("payment key: aes: %w", err)
	}
	out := make([]byte, len(in))
	cipher.NewCTR(b, iv).XORKeyStream(out, in)
	return out, nil
}
