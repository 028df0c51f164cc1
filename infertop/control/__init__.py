"""Actions: plan (pure) -> confirm -> execute -> audit. No UI imports."""
