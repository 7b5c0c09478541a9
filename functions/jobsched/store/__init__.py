"""DynamoDB and SQS adapters. Storage errors are translated into domain errors here."""
