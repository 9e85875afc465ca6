"""The linear-quadratic testbed: a discrete-time linear system with quadratic costs, trained
by Augmented Random Search (``lqr-ars``); the optimal costs come from the Riccati equations."""
