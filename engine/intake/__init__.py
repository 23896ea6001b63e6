"""The guided intake: the questions the rules still need, asked and written into case.yaml without losing what the user wrote."""
