"""The console's controllers: plain objects the App owns, each handed what it needs in its constructor
(the :class:`~infertop.ui.controllers.host.ConsoleHost` it reports through, its pane, its sources), so
that each is tested without a Pilot. The App binds the keys of the one action table to them."""
