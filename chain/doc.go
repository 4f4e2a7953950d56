// Package chain settles gpumesh leases on an EVM chain: a payment
// channel contract (contracts/PaymentChannel.sol, compiled offline by
// contracts/build.sh with solc 0.8.37 into contracts/build/ and embedded
// here), an [Adapter] that deposits, redeems, closes and withdraws
// through any go-ethereum contract backend, the EIP-712 chain voucher a
// renter signs beside each gpumesh voucher ([SignVoucher],
// [CheckVoucher]), and the [ChainKey] record that binds a node's libp2p
// peer ID and its secp256k1 payment address in both directions.
//
// This is the first step of issue 32: the contract and the adapter. The
// node does not use them yet (no chain vouchers on the job stream, no
// settle commands, no redeeming by itself).
//
// The package is a Go module of its own (github.com/gpumesh/gpumesh/chain)
// so that go-ethereum stays out of the node's go.mod and binary: the
// design study (notes/onchain.md) measured the production subset of
// go-ethereum at about +10.8 MB of binary (2.4 MB to 13.2 MB for a hello
// world), far over the 10% growth issue 32 allows the node. The root
// module's `go test ./...` does not enter it; `make test` runs its tests
// on a line of its own.
//
// The scheme, which docs/PROTOCOL.md §43 specifies for other
// implementations:
//
//   - EIP-712 domain {name "gpumesh", version "1", chainId,
//     verifyingContract} ([Domain]).
//   - A chain voucher, Voucher(address renter,address supplier,bytes32
//     leaseId,uint64 nonce,uint64 cumAmountMicros,bytes32 voucherHash),
//     copies the lease ID, nonce and cumulative amount of a gpumesh
//     voucher and commits to the SHA-256 of its envelope.
//   - A ChainKey record is a signed envelope of the peer (domain
//     gpumesh-chainkey-v1) whose payload carries the secp256k1 key's
//     EIP-712 signature of ChainKey(bytes peer,address account,uint64
//     createdMs) under the same domain.
//
// Amounts are money.Micros; the contract moves micros times its scale in
// token base units (scale 1 for a 6-decimal stablecoin).
package chain
