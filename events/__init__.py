"""Change events for eCom stores: the outbox written with each change, and (later) its relay and delivery."""
