"""Transactions: the pure core the transaction coordinator on a broker drives.

* ``records`` : ``TxnMetadata`` (one transactional id's state) and its record in the
  compacted ``__transaction_state`` topic.
* ``state``   : ``TxnCoordinatorState``, every transactional id of one partition, and the
  rules of their transitions (Kafka's ``TransactionCoordinator``, KIP-98 and KIP-890).

Pure: no I/O, no clock, no global random. See docs/transactions.md.
"""
