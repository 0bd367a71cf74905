"""Our error table, checked against how the official SDK maps each condition to an exception."""

from __future__ import annotations

import logging

import pytest
from azure.servicebus import exceptions as sb
from azure.servicebus._pyamqp.error import ErrorCondition
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

from sodalite import errors

# What a Service Bus user expects to catch for each of our errors, and whether the SDK retries it.
EXPECTED: dict[type[errors.SodaliteError], type[Exception]] = {
    errors.EntityNotFound: sb.MessagingEntityNotFoundError,
    errors.EntityAlreadyExists: sb.MessagingEntityAlreadyExistsError,
    errors.Unauthorized: sb.ServiceBusAuthorizationError,
    errors.Forbidden: sb.ServiceBusAuthorizationError,
    errors.MessageSizeExceeded: sb.MessageSizeExceededError,
    errors.QuotaExceeded: sb.ServiceBusQuotaExceededError,
    errors.StoreFull: sb.ServiceBusQuotaExceededError,
    errors.ServerBusy: sb.ServiceBusServerBusyError,
    errors.StoreUnavailable: sb.ServiceBusServerBusyError,
    errors.OperationTimeout: sb.OperationTimeoutError,
    errors.MessageLockLost: sb.MessageLockLostError,
    errors.MessageNotFound: sb.MessageNotFoundError,
    errors.SessionLockLost: sb.SessionLockLostError,
    errors.SessionCannotBeLocked: sb.SessionCannotBeLockedError,
    errors.InvalidOperation: sb.ServiceBusError,
    errors.NotImplementedOperation: sb.ServiceBusError,
    errors.ArgumentError: sb.ServiceBusError,
    errors.PayloadTooLarge: sb.ServiceBusError,
    errors.ConfigurationError: sb.ServiceBusError,
    errors.InternalError: sb.ServiceBusError,
    errors.OutboxCorrupt: sb.ServiceBusError,
    errors.FilterSyntaxError: sb.ServiceBusError,
    errors.FilterEvaluationError: sb.ServiceBusError,
    errors.TransactionUnknown: sb.ServiceBusError,
    errors.TransactionRolledBack: sb.ServiceBusError,
    errors.SecondaryUnavailable: sb.ServiceBusServerBusyError,
    errors.FailoverExhausted: sb.ServiceBusServerBusyError,
    errors.BacklogQueueSetupFailed: sb.ServiceBusAuthorizationError,
    errors.PairedClientClosed: sb.ServiceBusError,
    errors.SodaliteError: sb.ServiceBusError,
}


def _sdk_exception(condition: str) -> sb.ServiceBusError:
    raw = condition.encode()
    try:
        code: object = ErrorCondition(raw)
    except ValueError:
        code = raw
    return PyamqpTransport._handle_amqp_exception_with_condition(  # type: ignore[no-any-return]
        logging.getLogger("test"), code, "described")


def test_every_error_class_is_covered() -> None:
    # The classes of sodalite.errors: error_table() also lists subclasses other modules define (the
    # Spark client's), which are there only when a test of this worker imported them.
    ours = {row.name for row in errors.error_table() if getattr(errors, row.name, None) is not None}
    assert ours == {cls.__name__ for cls in EXPECTED}


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_condition_maps_to_the_expected_sdk_exception(cls: type[errors.SodaliteError]) -> None:
    exc = _sdk_exception(cls.condition)
    assert type(exc) is EXPECTED[cls]


@pytest.mark.parametrize("cls", [c for c in EXPECTED if c is not errors.SodaliteError], ids=lambda c: c.__name__)
def test_retryability_agrees_with_the_sdk(cls: type[errors.SodaliteError]) -> None:
    assert _sdk_exception(cls.condition)._retryable is cls.retryable
